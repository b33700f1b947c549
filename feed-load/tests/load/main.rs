//! The load tool's own test, in a test binary of its own: cargo runs test
//! binaries one after another, so no other test shares Redis with it while
//! it counts Redis's commands per page (`INFO commandstats` is global).

use feed_test_support as helpers;

mod browser;
mod tool;
