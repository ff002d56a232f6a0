//! Runs over many files, for the command line and the Python package alike:
//! a source file or folder planned into jobs (`tree`), shared among the
//! machines of a cluster job (`shard`), what each file is coded against
//! (`bases`), the jobs done in order (`jobs`), an archive opened by path or
//! URL (`open`), and with the `remote` feature, runs from and to object
//! storage (`store`).

pub mod bases;
pub mod jobs;
pub mod open;
pub mod shard;
#[cfg(feature = "remote")]
pub mod store;
pub mod tree;

pub use bases::{base_archives, refuse_orphaning, RunBases};
pub use jobs::{local_job, run_jobs, Tally, Watch};
#[cfg(feature = "remote")]
pub use open::open_archive_with;
pub use open::{is_url, open_archive};
pub use shard::Shard;
#[cfg(feature = "remote")]
pub use store::StoreRun;
pub use tree::{Action, Existing, Job};
