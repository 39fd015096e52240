//! Layering over every crate of the workspace.
//!
//! Within a crate, the module import graph has no circle (see
//! `gpuswap_house::module_graph` for how it is read). Between crates, the edges are the
//! ones written down below, checked from both sides: each crate's `Cargo.toml`
//! dependency tables, and the workspace crates its non-test sources name in a `use`, a
//! path or a macro call. An edge that is not in the table fails, naming the crate, the
//! file and the line; so does a table entry that no `Cargo.toml` makes any more, so the
//! table always states the dependencies as they are.

use std::collections::BTreeSet;
use std::sync::OnceLock;

use gpuswap_house::crate_rules::{
    CrateEdge, Forbidden, Section, Table, allows, forbidden_in_table, manifest_edges, source_edges,
    stale_entries, violations,
};
use gpuswap_house::module_graph::{Collapsed, circles, import_tree, unreached_files};
use gpuswap_house::refs::Reference;
use gpuswap_house::source::{Tree, read_disk};
use gpuswap_house::workspace::{crate_dir, crate_names, crate_roots, rust_files};

/// Module directories whose files count as one node. Only one type's `impl` split over
/// files belongs here; every other circle is to be fixed, not listed.
const COLLAPSED: &[Collapsed] = &[Collapsed {
    krate: "gpuswap-sim",
    module: "engine",
    why: "Engine's impl blocks split over files: they share its private fields and helpers",
}];

/// Each crate with the workspace crates its `[dependencies]` and `[build-dependencies]`
/// name, as they are; the order goes from the leaves up.
const DEPENDENCIES: Table = &[
    // Sizes and durations written by people: read by everyone, reads no one.
    ("gpuswap-units", &[]),
    // The sans-IO memory manager: no clock, no I/O, nothing above it.
    ("gpuswap-core", &[]),
    // The daemon's protocol: shared by the daemon and its clients, free of the core.
    ("gpuswap-wire", &[]),
    // The CPU stand-in for libcuda (C, built by build.rs).
    ("gpuswap-standin", &[]),
    ("gpuswap-sim", &["gpuswap-core", "gpuswap-units"]),
    ("gpuswap-vgpu", &["gpuswap-core", "gpuswap-sim"]),
    ("gpuswap-daemon", &["gpuswap-core", "gpuswap-wire"]),
    ("gpuswap-cuda", &["gpuswap-units", "gpuswap-wire"]),
    (
        "gpuswap-cli",
        &[
            "gpuswap-core",
            "gpuswap-sim",
            "gpuswap-vgpu",
            "gpuswap-daemon",
            "gpuswap-wire",
        ],
    ),
    // These tests: they read the other crates' sources, never link them.
    ("gpuswap-house", &[]),
];

/// The workspace crates `[dev-dependencies]` add on top of `DEPENDENCIES`.
const DEV_DEPENDENCIES: Table = &[
    (
        "gpuswap-cli",
        // The end-to-end tests run the interposer and the libcuda stand-in.
        &["gpuswap-cuda", "gpuswap-standin"],
    ),
    (
        "gpuswap-cuda",
        // A fake daemon's tests run the stand-in's client under the interposer.
        &["gpuswap-standin"],
    ),
    (
        "gpuswap-daemon",
        // The tests of memory still held run the stand-in's client under the
        // interposer against a daemon on the test's thread, restarted in place.
        &["gpuswap-standin"],
    ),
];

/// Edges no table may hold, in tests or not.
const FORBIDDEN: &[Forbidden] = &[
    Forbidden {
        from: "gpuswap-wire",
        to: "gpuswap-core",
        why: "wire never imports core: the protocol is what clients link, and they must not \
              need the memory manager",
    },
    Forbidden {
        from: "gpuswap-cuda",
        to: "gpuswap-core",
        why: "cuda never imports core: the interposer talks to the daemon over the wire only",
    },
    Forbidden {
        from: "gpuswap-core",
        to: "gpuswap-sim",
        why: "the core imports no simulator: it is driven by the simulator and the daemon alike",
    },
    Forbidden {
        from: "gpuswap-core",
        to: "gpuswap-vgpu",
        why: "the core imports no simulator: it is driven by the simulator and the daemon alike",
    },
    Forbidden {
        from: "gpuswap-core",
        to: "gpuswap-daemon",
        why: "the core imports no daemon: it is sans-IO",
    },
    Forbidden {
        from: "gpuswap-core",
        to: "gpuswap-cli",
        why: "the core imports no CLI: it is a library under every front end",
    },
];

fn workspace() -> Vec<&'static str> {
    DEPENDENCIES.iter().map(|(name, _)| *name).collect()
}

/// Every crate's module trees (one per root file) with their references, read once for
/// all the tests of this file.
fn trees() -> &'static [(String, Tree<Vec<Reference>>)] {
    static TREES: OnceLock<Vec<(String, Tree<Vec<Reference>>)>> = OnceLock::new();
    TREES.get_or_init(|| {
        crate_names()
            .into_iter()
            .flat_map(|krate| {
                crate_roots(&krate)
                    .into_iter()
                    .map(move |root| (krate.clone(), import_tree(&root, &read_disk)))
            })
            .collect()
    })
}

fn fail_on(problems: &[String], what: &str) {
    assert!(problems.is_empty(), "{what}:\n{}", problems.join("\n"));
}

#[test]
fn every_crate_has_a_row_in_the_table() {
    let listed: BTreeSet<String> = workspace().iter().map(|s| s.to_string()).collect();
    let present: BTreeSet<String> = crate_names().into_iter().collect();
    assert_eq!(
        listed, present,
        "DEPENDENCIES must have one row per directory under crates/"
    );
}

#[test]
fn no_crate_has_an_import_circle() {
    let mut report = String::new();
    for (krate, tree) in trees() {
        let collapsed: Vec<&str> = COLLAPSED
            .iter()
            .filter(|c| c.krate == krate)
            .map(|c| c.module)
            .collect();
        for circle in circles(krate, tree, &collapsed) {
            report += &circle.report;
        }
    }
    assert!(report.is_empty(), "import circles:\n{report}");
}

#[test]
fn every_collapsed_directory_exists() {
    // A stale exception would silently exempt whatever is later put under its name.
    for collapsed in COLLAPSED {
        let dir = crate_dir(collapsed.krate)
            .join("src")
            .join(collapsed.module.replace("::", "/"));
        assert!(
            dir.is_dir(),
            "{} is listed in COLLAPSED ({})",
            dir.display(),
            collapsed.why
        );
    }
}

#[test]
fn every_source_file_is_a_module_or_a_test() {
    let mut problems = Vec::new();
    for krate in crate_names() {
        let all = rust_files(&crate_dir(&krate).join("src"));
        // A file is fine when any of the crate's roots reaches it.
        let unreached = trees()
            .iter()
            .filter(|(k, _)| *k == krate)
            .map(|(_, tree)| {
                unreached_files(tree, &all)
                    .into_iter()
                    .collect::<BTreeSet<_>>()
            })
            .reduce(|a, b| a.intersection(&b).cloned().collect())
            .unwrap_or_default();
        problems.extend(unreached.iter().map(|f| {
            format!(
                "{}: neither a module nor a test of {krate} (its imports would go unchecked)",
                f.display()
            )
        }));
    }
    fail_on(&problems, "files outside the module trees");
}

#[test]
fn the_tables_break_no_rule() {
    let mut problems = forbidden_in_table(DEPENDENCIES, FORBIDDEN);
    problems.extend(forbidden_in_table(DEV_DEPENDENCIES, FORBIDDEN));
    fail_on(&problems, "forbidden edges in the tables");
}

/// The edges of every crate's manifest in `section`.
fn manifests(section: Section) -> Vec<CrateEdge> {
    let workspace = workspace();
    workspace
        .iter()
        .flat_map(|krate| {
            let manifest = crate_dir(krate).join("Cargo.toml");
            let text = read_disk(&manifest).expect("a crate has a Cargo.toml");
            manifest_edges(krate, &manifest, &text, section, &workspace)
        })
        .collect()
}

#[test]
fn manifests_match_the_tables() {
    let normal = manifests(Section::Normal);
    let mut problems = violations(&normal, DEPENDENCIES, FORBIDDEN);
    problems.extend(stale_entries(DEPENDENCIES, &normal));
    // A dev-dependency may repeat a normal one; the others must be in DEV_DEPENDENCIES.
    let dev: Vec<CrateEdge> = manifests(Section::Dev)
        .into_iter()
        .filter(|e| !allows(DEPENDENCIES, &e.from, &e.to))
        .collect();
    problems.extend(violations(&dev, DEV_DEPENDENCIES, FORBIDDEN));
    problems.extend(stale_entries(DEV_DEPENDENCIES, &dev));
    fail_on(&problems, "Cargo.toml edges against the tables");
}

#[test]
fn sources_use_only_the_crates_in_the_table() {
    let workspace = workspace();
    let edges: Vec<CrateEdge> = trees()
        .iter()
        .flat_map(|(krate, tree)| {
            let workspace = &workspace;
            tree.modules
                .iter()
                .flat_map(move |m| source_edges(krate, &m.file, &m.facts, workspace))
        })
        .collect();
    // The scan must see what it checks: the CLI runs the simulator.
    assert!(
        edges
            .iter()
            .any(|e| e.from == "gpuswap-cli" && e.to == "gpuswap-sim"),
        "no edge from gpuswap-cli to gpuswap-sim found: the scan is blind"
    );
    fail_on(
        &violations(&edges, DEPENDENCIES, FORBIDDEN),
        "source imports against the table",
    );
}
