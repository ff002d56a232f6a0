//! The decoder: single-code tables (kept per thread for the next chunk of the
//! same code), the four quarter streams decoded interleaved, and their bit
//! readers.

use super::*;

/// Decoding table indexed by the next 12 bits of a stream: `word << 32 | length`.
pub(super) type Table = [u64; TABLE_SIZE];

/// Fails unless the lengths form a complete prefix code (Kraft sum exactly 1),
/// which also guarantees every table entry is filled exactly once.
///
/// A slot's entry depends only on its low `longest` bits (the codes are
/// read lowest bit first, and none is longer), so those first `2^longest`
/// slots are filled code by code and then copied up to the full size: the
/// codes of a small tensor's exponents, a few bits long, fill a few hundred
/// slots rather than all 4096 (building tables weighs heavily in decoding a
/// file of small tensors).
pub(super) fn build_table(set: &SymbolSet) -> Option<Box<Table>> {
    let kraft: u32 = set.values.iter().map(|&len| 1 << (MAX_LEN - len)).sum();
    if kraft != TABLE_SIZE as u32 {
        return None;
    }
    let longest = set.values.iter().copied().max().unwrap_or(0);
    let mut table = Vec::with_capacity(TABLE_SIZE);
    table.resize(1 << longest, 0);
    let codes = canonical_codes(&set.values);
    for ((&word, &len), &code) in set.words.iter().zip(&set.values).zip(&codes) {
        let entry = (word as u64) << 32 | len as u64;
        for slot in (reverse(code, len) as usize..table.len()).step_by(1 << len) {
            table[slot] = entry;
        }
    }
    while table.len() < TABLE_SIZE {
        table.extend_from_within(..);
    }
    table.into_boxed_slice().try_into().ok()
}

/// The tables for one code. Checkpoints repeat the same code over many
/// chunks (the same lane of same-typed tensors), and building the tables
/// costs about as much as decoding a few thousand words (the multi-word table
/// several times that), so each thread keeps the last code's tables.
pub(super) struct Tables {
    pub(super) set: SymbolSet,
    pub(super) single: Box<Table>,
    /// Built on the first long enough stream, when [`multi_pays`].
    pub(super) multi: Option<Box<MultiTable>>,
}

thread_local! {
    static TABLES: RefCell<Option<Tables>> = const { RefCell::new(None) };
}

/// The code's words and their code lengths (after the tag).
pub(in crate::codec) fn read_table(r: &mut Reader, width: u32) -> Result<SymbolSet, WireError> {
    symbols::read(r, width, Values::Nibbles, MAX_LEN)
}

pub(in crate::codec) fn decode<T: Word>(
    r: &mut Reader,
    width: u32,
    out: &mut [T],
) -> Result<(), WireError> {
    let set = read_table(r, width)?;
    if set.values == [1, 1] {
        let streams = read_streams(r)?;
        let pair = [set.words[0], set.words[1]].map(T::from_u32);
        return decode_one_bit(&streams, pair, out).map_err(|reason| streams.error(reason));
    }
    TABLES.with_borrow_mut(|cached| {
        let tables = match cached {
            Some(t) if t.set.words == set.words && t.set.values == set.values => t,
            _ => {
                *cached = None;
                let single =
                    build_table(&set).ok_or_else(|| r.error("huffman code is not complete"))?;
                cached.insert(Tables {
                    set,
                    single,
                    multi: None,
                })
            }
        };
        if tables.multi.is_none() && out.len() >= MULTI_MIN_WORDS && multi_pays(&tables.set) {
            tables.multi = Some(build_multi_table(&tables.single));
        }
        decode_with(r, tables, out)
    })
}

/// The four quarters' bitstreams, as stored after the symbol set.
pub(super) struct Streams<'a> {
    /// All four streams, concatenated.
    pub(super) data: &'a [u8],
    /// Where `data` starts in the input, for errors.
    pub(super) at: usize,
    /// Byte offset in `data` where each stream starts, and where it ends.
    pub(super) starts: [usize; 4],
    pub(super) ends: [usize; 4],
}

impl Streams<'_> {
    pub(super) fn error(&self, reason: &'static str) -> WireError {
        WireError {
            at: self.at,
            reason,
        }
    }
}

/// Reads the four streams' lengths, then their bytes.
pub(super) fn read_streams<'a>(r: &mut Reader<'a>) -> Result<Streams<'a>, WireError> {
    let mut ends = [0usize; 4];
    let mut total = 0usize;
    for end in &mut ends {
        let remaining = r.remaining().saturating_sub(total) as u64;
        total += r.varint_max(remaining, "huffman stream runs past the end of data")? as usize;
        *end = total;
    }
    let at = r.pos();
    let data = r.bytes(total)?;
    let mut starts = [0; 4];
    starts[1..].copy_from_slice(&ends[..3]);
    Ok(Streams {
        data,
        at,
        starts,
        ends,
    })
}

/// Decodes the streams (after the symbol set) with `tables`.
pub(super) fn decode_with<T: Word>(
    r: &mut Reader,
    tables: &Tables,
    out: &mut [T],
) -> Result<(), WireError> {
    let s = read_streams(r)?;
    let streams = std::array::from_fn(|q| Bits::new(s.starts[q], s.ends[q]));
    // Tests that turn SIMD off run the plain build too.
    #[cfg(target_arch = "x86_64")]
    if crate::codec::simd::limit() != crate::codec::simd::Simd::None
        && std::arch::is_x86_feature_detected!("bmi2")
    {
        // SAFETY: the CPU has BMI2.
        let result = unsafe { decode_tables_bmi2(streams, s.data, tables, out) };
        return result.map_err(|reason| s.error(reason));
    }
    decode_tables(streams, s.data, tables, out).map_err(|reason| s.error(reason))
}

/// [`decode_tables`] compiled for BMI2: each word's variable shift is then
/// one `shrx` instead of a shift by `cl`, which needs the count moved into
/// `cl` and more micro-ops, in the decoders' inner loops.
///
/// # Safety
/// The CPU must support BMI2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "bmi2")]
pub(super) fn decode_tables_bmi2<T: Word>(
    streams: [Bits; 4],
    data: &[u8],
    tables: &Tables,
    out: &mut [T],
) -> Result<(), &'static str> {
    decode_tables(streams, data, tables, out)
}

/// Decodes with the multi-word table if there is one and `out` is long enough.
#[inline(always)]
pub(super) fn decode_tables<T: Word>(
    streams: [Bits; 4],
    data: &[u8],
    tables: &Tables,
    out: &mut [T],
) -> Result<(), &'static str> {
    match &tables.multi {
        Some(multi) if out.len() >= MULTI_MIN_WORDS => {
            decode_streams_multi(streams, data, &tables.single, multi, out)
        }
        _ => decode_streams(streams, data, &tables.single, out),
    }
}

/// Decodes the four quarters, interleaving the streams so their table
/// lookups overlap, then checks each stream was consumed exactly.
#[inline(always)]
pub(super) fn decode_streams<T: Word>(
    streams: [Bits; 4],
    data: &[u8],
    table: &Table,
    out: &mut [T],
) -> Result<(), &'static str> {
    let [mut s0, mut s1, mut s2, mut s3] = streams;
    let [q0, q1, q2, q3] = quarters(out);
    let mut done = 0;
    let groups = q0
        .chunks_exact_mut(4)
        .zip(q1.chunks_exact_mut(4))
        .zip(q2.chunks_exact_mut(4))
        .zip(q3.chunks_exact_mut(4));
    for (((a, b), c), d) in groups {
        // One refill leaves >= 57 bits: enough for four 12-bit codes.
        s0.refill(data);
        s1.refill(data);
        s2.refill(data);
        s3.refill(data);
        for t in 0..4 {
            a[t] = s0.decode(table);
            b[t] = s1.decode(table);
            c[t] = s2.decode(table);
            d[t] = s3.decode(table);
        }
        done += 4;
    }
    for (s, q) in [(s0, q0), (s1, q1), (s2, q2), (s3, q3)] {
        s.decode_rest(data, table, &mut q[done..])?;
    }
    Ok(())
}

/// `out` split into the four quarters the streams decode.
pub(super) fn quarters<T>(out: &mut [T]) -> [&mut [T]; 4] {
    let [r0, r1, r2, _] = quarter_ranges(out.len());
    let (q0, rest) = out.split_at_mut(r0.len());
    let (q1, rest) = rest.split_at_mut(r1.len());
    let (q2, q3) = rest.split_at_mut(r2.len());
    [q0, q1, q2, q3]
}

/// A bit reader over one stream inside the concatenated streams, least
/// significant bit first. It may read into the next stream or past the end
/// (as zeros); `finish` rejects any such overrun. Keeping only a bit position
/// and a buffer per stream lets four readers live in registers.
pub(super) struct Bits {
    /// Bit offset of the next unread bit in the concatenated streams.
    pub(super) pos: usize,
    /// Byte offset where this stream ends.
    pub(super) end: usize,
    /// Bits from `pos` on; at least 12 valid after each refill's budget.
    pub(super) buf: u64,
}

/// The 8 bytes starting at `at`, with zeros past the end of `data`.
#[inline(always)]
pub(super) fn load_u64(data: &[u8], at: usize) -> u64 {
    match data.get(at..at + 8) {
        Some(b) => u64::from_le_bytes(b.try_into().expect("8 bytes")),
        None => load_tail(data, at),
    }
}

#[cold]
pub(super) fn load_tail(data: &[u8], at: usize) -> u64 {
    let mut le = [0u8; 8];
    let rest = data.get(at..).unwrap_or(&[]);
    le[..rest.len()].copy_from_slice(rest);
    u64::from_le_bytes(le)
}

impl Bits {
    pub(super) fn new(start: usize, end: usize) -> Self {
        Bits {
            pos: start * 8,
            end,
            buf: 0,
        }
    }

    /// Loads the 64 bits at the byte holding `pos`; after dropping the bits
    /// before `pos`, at least 57 remain.
    #[inline(always)]
    pub(super) fn refill(&mut self, data: &[u8]) {
        self.buf = load_u64(data, self.pos / 8) >> (self.pos % 8);
    }

    /// Decodes one word; needs at least 12 valid bits.
    #[inline(always)]
    pub(super) fn decode<T: Word>(&mut self, table: &Table) -> T {
        let entry = table[(self.buf & PEEK_MASK) as usize];
        let len = entry as u32 & 15;
        self.buf >>= len;
        self.pos += len as usize;
        T::from_u32((entry >> 32) as u32)
    }

    /// Decodes the words of one multi-word entry into `out` from `*at` on,
    /// advancing `*at` past them; needs at least 12 valid bits and
    /// [`MULTI_SLOTS`] slots from `*at`. All slots are written (one store of
    /// the whole entry) since that is cheaper than storing just `count`.
    #[inline(always)]
    pub(super) fn decode_multi<T: Word>(
        &mut self,
        table: &MultiTable,
        out: &mut [T],
        at: &mut usize,
    ) {
        let entry = table[(self.buf & PEEK_MASK) as usize];
        let slots: &mut [T; MULTI_SLOTS] = (&mut out[*at..*at + MULTI_SLOTS])
            .try_into()
            .expect("MULTI_SLOTS slots");
        store_bytes(entry, slots);
        let len = (entry >> 56) as u32 & 15;
        *at += (entry >> 60) as usize;
        self.buf >>= len;
        self.pos += len as usize;
    }

    pub(super) fn decode_rest<T: Word>(
        mut self,
        data: &[u8],
        table: &Table,
        out: &mut [T],
    ) -> Result<(), &'static str> {
        for o in out {
            self.refill(data);
            *o = self.decode(table);
        }
        self.finish(data)
    }

    /// Checks the stream was consumed exactly: no bits read past its end, no
    /// whole byte left over, and zero padding bits in its last byte.
    pub(super) fn finish(mut self, data: &[u8]) -> Result<(), &'static str> {
        let end = self.end as u64 * 8;
        let pos = self.pos as u64;
        if pos > end {
            return Err("huffman stream overrun");
        }
        let left = end - pos;
        if left >= 8 {
            return Err("huffman stream has unread bytes");
        }
        self.refill(data);
        if self.buf & ((1 << left) - 1) != 0 {
            return Err("huffman padding bits are not zero");
        }
        Ok(())
    }
}
