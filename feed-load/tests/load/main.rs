//! The load tool's own test, in a test binary of its own: cargo runs test
//! binaries one after another, so no other test shares Redis with it while
//! it counts Redis's commands per page (`INFO commandstats` is global).

mod browser;
#[allow(dead_code)]
#[path = "../../../tests/api/helpers.rs"]
mod helpers;
mod tool;
