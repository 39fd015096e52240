//! serde in the core only on the types that reports and `top --json` serialize.
//!
//! The core is a sans-IO library; a `Serialize` on one of its types is a promise about an
//! output format, so each one is listed here with the output that needs it. Every type
//! in `crates/gpuswap-core/src` (non-test code) that derives or implements `Serialize` or
//! `Deserialize` must be listed, and every listed type must still do so.

use std::collections::BTreeMap;

use gpuswap_house::serde_types::serde_types;
use gpuswap_house::source::{read_disk, walk};
use gpuswap_house::workspace::{crate_roots, relative};

/// The core's serde types, each with the output that serializes it.
const SERIALIZED: &[(&str, &str)] = &[
    (
        "Contract",
        "in the run report: each tenant's memory contract (tenants[].contract)",
    ),
    (
        "AtLimit",
        "in the run report: a field of Contract (tenants[].contract.at_limit)",
    ),
];

#[test]
fn serde_in_the_core_is_on_the_listed_types_only() {
    // Each serde type with the first place that makes it one.
    let mut found: BTreeMap<String, String> = BTreeMap::new();
    for root in crate_roots("gpuswap-core") {
        let tree = walk(&root, &read_disk, &|_, ast| serde_types(ast));
        for module in &tree.modules {
            for t in &module.facts {
                let place = format!("{}:{} ({})", relative(&module.file), t.line, t.how);
                found.entry(t.name.clone()).or_insert(place);
            }
        }
    }
    let listed = |name: &str| SERIALIZED.iter().any(|(n, _)| *n == name);
    let mut problems: Vec<String> = found
        .iter()
        .filter(|(name, _)| !listed(name))
        .map(|(name, place)| {
            format!(
                "{name} ({place}) is new serde in the core: add it to SERIALIZED with the \
                 output that needs it only if a report or `top --json` serializes it; \
                 otherwise keep serde out of the core"
            )
        })
        .collect();
    problems.extend(
        SERIALIZED
            .iter()
            .map(|(n, _)| *n)
            .filter(|name| !found.contains_key(*name))
            .map(|name| format!("{name} is listed but no longer serde: remove its entry")),
    );
    assert!(
        problems.is_empty(),
        "serde in the core:\n{}",
        problems.join("\n")
    );
}
