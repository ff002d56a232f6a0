//! Archives in object storage (`s3://BUCKET/PREFIX`, or `https://HOST/PATH` of
//! a web server answering range requests), read without downloading them:
//! the trailer and index once per archive, then only the byte ranges of the
//! records a read touches.
//!
//! [`store`] talks to the store (object_store on a tokio runtime of its own,
//! bounded waits, retries); [`object`] turns an object into a
//! [`ByteSource`](crate::archive::ByteSource) with block caching, coalesced
//! and parallel fetches and a growing window for sequential readers; [`disk`]
//! keeps fetched bytes on local disk, keyed by ETag, written by a thread of
//! its own; `extents` says which entries hold which blocks (whole MiB
//! extents where it can); [`open`] opens one
//! archive by its URL. Every chunk decoded from
//! these bytes is checked against its checksum by the archive reader.

pub mod disk;
mod extents;
mod memory;
pub mod object;
pub mod open;
pub mod store;

pub use disk::DiskCache;
pub use memory::BLOCK;
pub use object::{Opener, Remote, RemoteObject};
pub use open::{open_archive, opener};
pub use store::{is_remote, split_url, ObjectInfo, RemoteOptions, Stats, Store};
