//! The house rules of the gpuswap workspace as tests. The library holds the checkers,
//! each tested on small examples of its own; the tests under `tests/` run them over the
//! workspace and hold the rules' data (the allowed crate edges, the serde types of the
//! core, the functions still over the length limit).
//!
//! The sources are read with `syn`, so comments, strings, macro calls and test-only code
//! are told apart as the compiler tells them, and with proc-macro2's span locations, so
//! every finding has its line.

pub mod architecture;
pub mod crate_rules;
pub mod fn_length;
pub mod module_graph;
pub mod refs;
pub mod serde_types;
pub mod source;
pub mod workspace;
