//! The index's table of shared code tables (docs/FORMAT.md, "Shared code
//! tables (version 10)"): each a Huffman or rANS literal's table, stored
//! once for the literals of a tensor's chunks that name it. The index only
//! frames them; a literal's decoder reads and checks the table it names.

#![forbid(unsafe_code)]

use crate::wire::{put_varint, Reader, WireError};

/// The most bytes a code table may take: a table of 4096 words at most,
/// each word's gap and value, fits well within it.
pub const MAX_TABLE_LEN: u64 = 1 << 16;

/// Appends `tables`: their count, then each one's length and bytes.
pub fn encode_tables(tables: &[Vec<u8>], out: &mut Vec<u8>) {
    put_varint(out, tables.len() as u64);
    for table in tables {
        put_varint(out, table.len() as u64);
        out.extend_from_slice(table);
    }
}

/// Reads a table of code tables. Every count and length is checked against
/// what is left of the index before anything is allocated.
pub fn decode_tables(r: &mut Reader) -> Result<Vec<Vec<u8>>, WireError> {
    // A table takes at least two bytes: its length and one byte.
    let count = r.varint_max(
        r.remaining() as u64 / 2,
        "code table count exceeds index size",
    )?;
    let mut tables = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let at = r.pos();
        let len = r.varint_max(MAX_TABLE_LEN, "code table too long")?;
        if len == 0 {
            return Err(WireError {
                at,
                reason: "code table is empty",
            });
        }
        tables.push(r.bytes(len as usize)?.to_vec());
    }
    Ok(tables)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn tables_round_trip(tables in prop::collection::vec(
            prop::collection::vec(any::<u8>(), 1..300), 0..20)) {
            let mut bytes = Vec::new();
            encode_tables(&tables, &mut bytes);
            let mut r = Reader::new(&bytes);
            prop_assert_eq!(decode_tables(&mut r).unwrap(), tables);
            prop_assert!(r.is_empty());
        }

        #[test]
        fn any_bytes_decode_or_fail_without_panic(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
            let mut r = Reader::new(&bytes);
            if let Ok(tables) = decode_tables(&mut r) {
                let mut again = Vec::new();
                encode_tables(&tables, &mut again);
                prop_assert_eq!(&again[..], &bytes[..r.pos()]);
            }
        }
    }
}
