//! Registry metadata in SQLite: repository blob links, manifests and what they reference, tags, upload
//! sessions. SQLite (bundled) rather than redb because the invariants are relational — a tag references a
//! manifest (foreign key), a manifest's references must be linked in its repository, referrers are an index
//! on `subject` — and transactions with those checks inside are one SQL statement each; the file is also
//! inspectable with the stock `sqlite3` shell at a remote site. WAL + synchronous=FULL: a committed
//! transaction survives power loss.
//!
//! Invariant kept here: a tag never points at a manifest whose blobs (or child manifests) are not linked.
//!
//! A module per table: [`repository`] (blob links and tags), [`manifests`], [`uploads`] (the registry's),
//! [`images`] (BPA's records), [`tus`]; [`db`] holds the connection and schema, [`check`] the consistency
//! check.

mod check;
mod db;
mod images;
mod manifests;
mod repository;
mod tus;
mod uploads;

pub use db::{ManifestRow, Meta, MetaError};
pub use images::{CompleteImage, ImageKey, ImageRow};
pub use tus::TusRow;
