//! The end-to-end tests live in this crate's tests (`image.rs`); the library is empty.
