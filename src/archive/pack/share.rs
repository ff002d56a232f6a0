//! Code tables shared by a tensor's chunks (docs/FORMAT.md, "Shared code
//! tables (version 10)"). The chunks of a tensor are searched one by one,
//! and each Huffman or rANS literal pays for its own table; where the
//! literals at one place of the programs of a run of a tensor's chunks (the
//! high bytes of its words, say) draw on much the same words, one table
//! fitted to all of them, stored once in the index, costs less than a table
//! in every chunk. Each literal is re-coded with it only where that is
//! smaller, and the table kept only where the run's records, less what the
//! table adds to the index, come out smaller: never a larger archive.

use crate::archive::format::ChunkEntry;
use crate::codec::{self, Codec, SharedCode};
use crate::dsl::{decode_program, EncodedLit, Limits, Op, Program, Type};
use crate::wire::{put_varint, varint_len};
use std::collections::BTreeMap;

/// Source bytes of a run of a tensor's chunks whose literals may share
/// tables, at most (or a chunk more): bounds the records held back from
/// writing and the words decoded to fit a table to (4 bytes a word of a
/// place), while a tensor's words change little from one run to the next
/// (16 chunks of the default 256 KiB).
pub(super) const RUN_BYTES: u64 = 4 << 20;

/// Own tables of a place's literals, in bytes, below which no shared table
/// is tried: a shared table saves at most about what theirs cost.
const MIN_OWN_TABLES: usize = 64;

/// A literal with a table of its own: its chunk, where its bytes start in
/// the chunk's record, how many there are, how many words it holds, and
/// its codec.
struct Site {
    chunk: usize,
    at: usize,
    len: usize,
    words: usize,
    codec: Codec,
}

/// A chunk's index entry and record.
pub(super) type Record = (ChunkEntry, Vec<u8>);

/// A place in the chunks' programs: the lane, the literal's rank among the
/// lane's literals in program order, and its words' width.
type Place = (usize, usize, u32);

/// A literal re-coded: where its bytes start in its record, how many there
/// were, and its new bytes.
type Edit = (usize, usize, Vec<u8>);

/// Re-codes the literals of `records`, chunks of one tensor in order, with
/// tables shared among them wherever that is smaller, appending the tables
/// to `tables` (the archive's so far, which the records may name).
pub(super) fn share(records: &mut [Record], tables: &mut Vec<Vec<u8>>) {
    let mut edits: Vec<Vec<Edit>> = vec![Vec::new(); records.len()];
    for ((_, _, width), sites) in places(records) {
        share_place(records, width, &sites, tables, &mut edits);
    }
    for ((entry, record), mut edits) in records.iter_mut().zip(edits) {
        // From the last, so that the places of those before stay put.
        edits.sort_by_key(|&(at, _, _)| std::cmp::Reverse(at));
        for (at, len, new) in edits {
            let mut node = Vec::with_capacity(new.len() + 5);
            put_varint(&mut node, new.len() as u64);
            node.extend_from_slice(&new);
            record.splice(at - varint_len(len as u64)..at + len, node);
        }
        entry.rec_len = record.len() as u64;
    }
}

/// Fits a table to the literals `sites` of one place, of `width`-bit
/// words, and where it pays appends it to `tables` and the literals it
/// re-codes to their chunks' `edits`.
fn share_place(
    records: &[Record],
    width: u32,
    sites: &[Site],
    tables: &mut Vec<Vec<u8>>,
    edits: &mut [Vec<Edit>],
) {
    let literal = |s: &Site| &records[s.chunk].1[s.at..s.at + s.len];
    let own = (sites.iter()).map(|s| codec::table_len(literal(s), width).unwrap_or(0));
    if sites.len() < 2 || own.sum::<usize>() < MIN_OWN_TABLES {
        return;
    }
    let words = Words::of(sites.iter().map(|s| (literal(s), s.words)), width);
    let lens: Vec<usize> = sites.iter().map(|s| s.len).collect();
    // A table of a codec none of them chose seldom beats one of theirs,
    // and fitting and coding with each costs about as much as packing.
    let chosen = |c: &Codec| sites.iter().any(|s| s.codec == *c);
    let codecs: Vec<Codec> = [Codec::Rans, Codec::Huffman]
        .into_iter()
        .filter(chosen)
        .collect();
    let Some(shared) = best_shared(&codecs, &words, &lens, width, tables.len()) else {
        return;
    };
    tables.push(shared.table);
    for (k, (site, new)) in sites.iter().zip(shared.coded).enumerate() {
        if let Some(new) = new {
            check(&new, tables, width, words.literal(k));
            edits[site.chunk].push((site.at, site.len, new));
        }
    }
}

/// The literals with tables of their own in `records`, by place.
fn places(records: &[Record]) -> BTreeMap<Place, Vec<Site>> {
    let mut places: BTreeMap<Place, Vec<Site>> = BTreeMap::new();
    for (chunk, (entry, record)) in records.iter().enumerate() {
        let ty = Type {
            width: entry.layout.lane_width(),
            len: entry.src_len as usize / entry.layout.element_bytes(),
        };
        let mut pos = 0;
        for lane in 0..entry.layout.lanes() {
            let (program, used) =
                decode_program(&record[pos..], ty, Limits::default()).expect("a packed record");
            let mut lits = Vec::new();
            literals(&program, &mut lits);
            for (rank, (ty, l)) in lits.into_iter().enumerate() {
                let codec = codec::peek_codec(l.bytes).expect("a packed literal");
                if !matches!(codec, Codec::Huffman | Codec::Rans) {
                    continue;
                }
                let site = Site {
                    chunk,
                    at: pos + l.at,
                    len: l.bytes.len(),
                    words: ty.len,
                    codec,
                };
                places.entry((lane, rank, ty.width)).or_default().push(site);
            }
            pos += used;
        }
    }
    places
}

/// The literals of `p` with their types, in program order.
fn literals<'a>(p: &Program<EncodedLit<'a>>, out: &mut Vec<(Type, EncodedLit<'a>)>) {
    if let Op::Lit(l) = &p.op {
        out.push((p.ty, *l));
    }
    p.children().for_each(|c| literals(c, out));
}

/// The words of a place's literals one after another, and where each
/// literal's end: in one buffer, as a table is fitted to all of them.
struct Words {
    all: Vec<u32>,
    ends: Vec<usize>,
}

impl Words {
    /// The words of `literals`, each the packer's literal of so many words
    /// of `width` bits.
    fn of<'a>(
        literals: impl ExactSizeIterator<Item = (&'a [u8], usize)> + Clone,
        width: u32,
    ) -> Words {
        let total = literals.clone().map(|(_, n)| n).sum();
        let (mut all, mut ends) = (
            Vec::with_capacity(total),
            Vec::with_capacity(literals.len()),
        );
        for (literal, n) in literals {
            let start = all.len();
            all.resize(start + n, 0);
            codec::decode(literal, width, &mut all[start..]).expect("a packed literal decodes");
            ends.push(all.len());
        }
        Words { all, ends }
    }

    /// The words of literal `k`.
    fn literal(&self, k: usize) -> &[u32] {
        let start = if k == 0 { 0 } else { self.ends[k - 1] };
        &self.all[start..self.ends[k]]
    }
}

/// A shared table, each literal coded with it where that is smaller than
/// its own encoding (None where it is not), and the bytes that saves
/// beyond what the table adds to the index.
struct Shared {
    table: Vec<u8>,
    coded: Vec<Option<Vec<u8>>>,
    net: usize,
}

/// The table, of one of `codecs`, that codes the literals of `words`
/// (their own encodings `lens` bytes long) smallest with their share of
/// it, as table number `number`: None where no table saves more than it
/// costs.
fn best_shared(
    codecs: &[Codec],
    words: &Words,
    lens: &[usize],
    width: u32,
    number: usize,
) -> Option<Shared> {
    let mut best: Option<Shared> = None;
    for &codec in codecs {
        let Some(code) = SharedCode::new(codec, &words.all, width, lens.len()) else {
            continue;
        };
        let table = code.table();
        let (mut saved, mut coded) = (0, Vec::with_capacity(lens.len()));
        for (k, &len) in lens.iter().enumerate() {
            let mut new = Vec::new();
            code.encode(number as u32, words.literal(k), &mut new);
            let gain = node_len(len).saturating_sub(node_len(new.len()));
            saved += gain;
            coded.push((gain > 0).then_some(new));
        }
        let net = saved.saturating_sub(table_cost(number, table.len()));
        if net > 0 && best.as_ref().is_none_or(|b| net > b.net) {
            best = Some(Shared { table, coded, net });
        }
    }
    best
}

/// Bytes of a Lit node's size and literal, `len` bytes long.
fn node_len(len: usize) -> usize {
    varint_len(len as u64) + len
}

/// Bytes the index grows by with a table of `len` bytes after `count`
/// others: its length and bytes, and the count's (a version 10 index,
/// which the first table makes the archive, has a count where an older one
/// has none).
fn table_cost(count: usize, len: usize) -> usize {
    let before = if count == 0 {
        0
    } else {
        varint_len(count as u64)
    };
    varint_len(count as u64 + 1) - before + varint_len(len as u64) + len
}

/// Checks a re-coded literal decodes to its words: what is written must
/// decode, as every record does before it is written.
fn check(literal: &[u8], tables: &[Vec<u8>], width: u32, words: &[u32]) {
    let mut decoded = vec![0u32; words.len()];
    let used = codec::decode_in(literal, tables, width, &mut decoded);
    assert!(
        used == Ok(literal.len()) && decoded == words,
        "a shared table's literal decodes to its words"
    );
}

#[cfg(test)]
mod tests {
    use super::super::encode::encode_record;
    use super::*;
    use crate::archive::decode::decode_record;
    use crate::archive::format::FORMAT_VERSION;
    use crate::dsl::FloatFormat;
    use crate::safetensors::Layout;
    use crate::synth::{Hint, SynthOptions};

    /// `n` BF16 weights, roughly normal around 0 with a spread of 0.02.
    fn weights(seed: u64, n: usize) -> Vec<u8> {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut uniform = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 11) as f32 / (1u64 << 53) as f32
        };
        let normal = |u: &mut dyn FnMut() -> f32| (0..4).map(|_| u()).sum::<f32>() - 2.0;
        (0..n)
            .map(|_| ((0.02 * normal(&mut uniform)).to_bits() >> 16) as u16)
            .flat_map(u16::to_le_bytes)
            .collect()
    }

    #[test]
    fn a_tensors_chunks_share_tables_and_decode_with_them_alone() {
        let chunks: Vec<Vec<u8>> = (0..10).map(|k| weights(k, 16384)).collect();
        let hint = Hint {
            float: Some(FloatFormat::Bf16),
            rows: None,
            columns: None,
        };
        let mut records: Vec<Record> = (chunks.iter())
            .map(|bytes| {
                let record = encode_record(bytes, Layout::Half, hint, &SynthOptions::default());
                let entry = ChunkEntry {
                    layout: Layout::Half,
                    src_len: bytes.len() as u64,
                    rec_len: record.len() as u64,
                    checksum: 0,
                    base: None,
                };
                (entry, record)
            })
            .collect();
        let before: usize = records.iter().map(|(_, r)| r.len()).sum();
        let mut tables = Vec::new();
        share(&mut records, &mut tables);
        let after: usize = records.iter().map(|(_, r)| r.len()).sum();
        let index: usize = tables.iter().map(|t| 2 + t.len()).sum();
        assert!(
            !tables.is_empty() && after + index < before,
            "{after} + {index} of {before}"
        );
        for (bytes, (entry, record)) in chunks.iter().zip(&records) {
            assert_eq!(entry.rec_len as usize, record.len());
            let mut out = vec![0u8; bytes.len()];
            decode_record(record, Layout::Half, (FORMAT_VERSION, &tables), &mut out).unwrap();
            assert!(out == *bytes, "a chunk decodes alone with the tables");
        }
        let mut out = vec![0u8; chunks[1].len()];
        let without = decode_record(&records[1].1, Layout::Half, (FORMAT_VERSION, &[]), &mut out);
        assert!(without.is_err(), "a shared literal needs its table");
    }
}
