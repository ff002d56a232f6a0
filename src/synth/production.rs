//! Productions: the grammar's choices at a hole, as the prior counts them.

use crate::dsl::{Fields, MapOp, Op, ScanOp};
use std::fmt;

/// One choice of operator (with the kind of its parameters, not their values).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Production {
    Lit,
    Const,
    Concat,
    Repeat,
    MapXor,
    MapAdd,
    MapZigzag,
    MapGray,
    MapRotate,
    MapBitReverse,
    ScanXor,
    ScanAdd,
    MergeFloat,
    MergeSplit,
    MergeBitPlanes,
    MergeBytePlanes,
    Palette,
    Scaled,
    /// A Match node (format version 4). Not a production of the search's
    /// grammar and not in [`Production::ALL`] (so priors are unchanged): the
    /// packer offers a Match at a lane's root beside the search's program.
    Match,
    /// A Sparse node (format version 5): like Match, outside
    /// [`Production::ALL`]; a leaf of a stream that is one word nearly
    /// everywhere may be one (see [`super::leaf()`]).
    Sparse,
    /// A Partition node (format version 7): like Match, outside
    /// [`Production::ALL`]; a literal of the words of a tensor's rows may
    /// become one (see [`super::partition_rows`]).
    Partition,
    /// A Mirror node (format version 8): like Match, outside
    /// [`Production::ALL`]; the packer offers one at a lane's root where
    /// the tensor's rows mirror themselves (see `super::passes`).
    Mirror,
    /// A ColumnScan node (format version 11): like Match, outside
    /// [`Production::ALL`]; the packer offers one at a lane's root where
    /// the tensor's columns change slowly down its rows (see `super::passes`).
    ColumnScan,
}

impl Production {
    pub const ALL: [Production; 18] = [
        Production::Lit,
        Production::Const,
        Production::Concat,
        Production::Repeat,
        Production::MapXor,
        Production::MapAdd,
        Production::MapZigzag,
        Production::MapGray,
        Production::MapRotate,
        Production::MapBitReverse,
        Production::ScanXor,
        Production::ScanAdd,
        Production::MergeFloat,
        Production::MergeSplit,
        Production::MergeBitPlanes,
        Production::MergeBytePlanes,
        Production::Palette,
        Production::Scaled,
    ];

    pub fn index(self) -> usize {
        self as usize
    }

    pub fn of_map(op: MapOp) -> Production {
        match op {
            MapOp::Xor(_) => Production::MapXor,
            MapOp::Add(_) => Production::MapAdd,
            MapOp::Zigzag => Production::MapZigzag,
            MapOp::Gray => Production::MapGray,
            MapOp::Rotate(_) => Production::MapRotate,
            MapOp::BitReverse => Production::MapBitReverse,
        }
    }

    pub fn of_scan(op: ScanOp) -> Production {
        match op {
            ScanOp::Xor => Production::ScanXor,
            ScanOp::Add => Production::ScanAdd,
        }
    }

    pub fn of_fields(fields: Fields) -> Production {
        match fields {
            Fields::Float(_) => Production::MergeFloat,
            Fields::Split { .. } => Production::MergeSplit,
            Fields::BitPlanes => Production::MergeBitPlanes,
            Fields::BytePlanes => Production::MergeBytePlanes,
        }
    }

    /// The production a program node was made by.
    pub fn of_op<L>(op: &Op<L>) -> Production {
        match op {
            Op::Lit(_) => Production::Lit,
            Op::Const(_) => Production::Const,
            Op::Concat(_) => Production::Concat,
            Op::Repeat { .. } => Production::Repeat,
            Op::Map { op, .. } => Production::of_map(*op),
            Op::Scan { op, .. } => Production::of_scan(*op),
            Op::Merge { fields, .. } => Production::of_fields(*fields),
            Op::Palette { .. } => Production::Palette,
            Op::Scaled { .. } => Production::Scaled,
            Op::Match { .. } => Production::Match,
            Op::Sparse { .. } => Production::Sparse,
            Op::Partition { .. } => Production::Partition,
            Op::Mirror { .. } => Production::Mirror,
            Op::ColumnScan { .. } => Production::ColumnScan,
        }
    }

    /// The production the prior counts for a hole closed by `leaf` (see
    /// [`super::leaf()`]): a Sparse leaf is a literal's alternative, not a
    /// choice of the grammar.
    pub fn of_leaf<L>(leaf: &Op<L>) -> Production {
        match leaf {
            Op::Const(_) => Production::Const,
            _ => Production::Lit,
        }
    }

    /// Whether this is one of the six Map productions.
    pub fn is_map(self) -> bool {
        matches!(
            self,
            Production::MapXor
                | Production::MapAdd
                | Production::MapZigzag
                | Production::MapGray
                | Production::MapRotate
                | Production::MapBitReverse
        )
    }

    /// Whether nodes of this production cost a full pass over their words when
    /// decoding, without changing how many there are (Maps, Scans, a
    /// Palette's table lookups, a Scaled node's products, a Partition's
    /// gathering of its groups, a Mirror's rows, a ColumnScan's sums).
    pub fn is_full_pass(self) -> bool {
        self.is_map()
            || matches!(
                self,
                Production::ScanXor
                    | Production::ScanAdd
                    | Production::Palette
                    | Production::Scaled
                    | Production::Match
                    | Production::Partition
                    | Production::Mirror
                    | Production::ColumnScan
            )
    }

    pub fn name(self) -> &'static str {
        match self {
            Production::Lit => "lit",
            Production::Const => "const",
            Production::Concat => "concat",
            Production::Repeat => "repeat",
            Production::MapXor => "map-xor",
            Production::MapAdd => "map-add",
            Production::MapZigzag => "map-zigzag",
            Production::MapGray => "map-gray",
            Production::MapRotate => "map-rotate",
            Production::MapBitReverse => "map-bitrev",
            Production::ScanXor => "scan-xor",
            Production::ScanAdd => "scan-add",
            Production::MergeFloat => "merge-float",
            Production::MergeSplit => "merge-split",
            Production::MergeBitPlanes => "merge-bits",
            Production::MergeBytePlanes => "merge-bytes",
            Production::Palette => "palette",
            Production::Scaled => "scaled",
            Production::Match => "match",
            Production::Sparse => "sparse",
            Production::Partition => "partition",
            Production::Mirror => "mirror",
            Production::ColumnScan => "column-scan",
        }
    }

    pub fn from_name(name: &str) -> Option<Production> {
        Production::ALL.into_iter().find(|p| p.name() == name)
    }
}

impl fmt::Display for Production {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
