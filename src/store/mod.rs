//! The two stores: PostgreSQL holds the records of truth; Redis holds what
//! is derived from them and may lose it at any time.

pub mod pg;
pub mod redis;
