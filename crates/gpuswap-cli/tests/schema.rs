//! docs/results-schema.md is what a sweep writes: every column of every CSV file matches
//! one row of the file's table there, and every cell has the row's type.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
}

/// Per file, the schema's rows: column pattern and type.
fn schema() -> BTreeMap<String, Vec<(String, String)>> {
    let text = std::fs::read_to_string(repo("docs/results-schema.md")).unwrap();
    let mut files = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        if let Some(file) = line.strip_prefix("## ") {
            current = Some(file.trim().to_owned());
        } else if let (Some(file), Some(row)) = (&current, line.strip_prefix("| `")) {
            let mut cells = row.split('|').map(str::trim);
            let column = cells.next().unwrap().trim_end_matches('`').to_owned();
            let kind = cells.next().unwrap().to_owned();
            files
                .entry(file.clone())
                .or_insert_with(Vec::new)
                .push((column, kind));
        }
    }
    files
}

/// Whether `column` matches `pattern`, whose upper-case words stand for any non-empty
/// text; `KEY` alone only for the sweep's varied keys.
fn matches(pattern: &str, column: &str, varied: &[&str]) -> bool {
    if pattern == "KEY" {
        return varied.contains(&column);
    }
    match pattern.split_once('.') {
        Some((head, tail)) if head.chars().all(|c| c.is_ascii_uppercase()) => column
            .rsplit_once('.')
            .is_some_and(|(h, t)| !h.is_empty() && matches(tail, t, varied)),
        _ if pattern.chars().all(|c| c.is_ascii_uppercase()) => {
            !column.is_empty() && !column.contains('.')
        }
        _ => pattern == column,
    }
}

fn check_cell(kind: &str, cell: &str) -> bool {
    cell.is_empty()
        || match kind {
            "integer" => cell.parse::<i64>().is_ok(),
            "number" => cell.parse::<f64>().is_ok_and(f64::is_finite),
            "bool" => cell == "true" || cell == "false",
            "text" => true,
            other => panic!("unknown type {other} in the schema"),
        }
}

/// Runs `gpuswap sweep SCENARIO` into a fresh folder and checks each CSV it wrote.
fn check_sweep(name: &str, scenario: &str, varied: &[&str], expect: &[&str]) {
    let dir = std::env::temp_dir().join(format!("gpuswap-schema-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("s.toml");
    std::fs::write(&file, scenario).unwrap();
    let out_dir = dir.join("out");
    let out = Command::new(env!("CARGO_BIN_EXE_gpuswap"))
        .args(["sweep", file.to_str().unwrap(), "--quiet", "--out"])
        .arg(&out_dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let schema = schema();
    for csv_name in expect {
        let path = out_dir.join(csv_name);
        let rows = &schema[*csv_name];
        let mut reader = csv::Reader::from_path(&path).unwrap();
        let header: Vec<String> = reader.headers().unwrap().iter().map(String::from).collect();
        let mut seen = std::collections::HashSet::new();
        let kinds: Vec<&str> = header
            .iter()
            .map(|column| {
                assert!(seen.insert(column), "{name}: {csv_name} repeats {column}");
                // Literal rows first: `TENANT.error` must not take `error`.
                let literal = rows.iter().find(|(p, _)| p == column);
                let (_, kind) = literal
                    .or_else(|| rows.iter().find(|(p, _)| matches(p, column, varied)))
                    .unwrap_or_else(|| {
                        panic!(
                            "{name}: {csv_name}'s column {column} is not in docs/results-schema.md"
                        )
                    });
                kind.as_str()
            })
            .collect();
        let mut count = 0;
        for record in reader.records() {
            let record = record.unwrap();
            assert_eq!(record.len(), header.len(), "{name}: {csv_name}");
            for ((cell, kind), column) in record.iter().zip(&kinds).zip(&header) {
                assert!(
                    check_cell(kind, cell),
                    "{name}: {csv_name} {column} = {cell:?} is no {kind}"
                );
            }
            count += 1;
        }
        assert!(count > 0, "{name}: {csv_name} has no rows");
    }
}

#[test]
fn a_tenant_sweep_writes_what_the_schema_says() {
    check_sweep(
        "native",
        "seed = 1\n[device]\npreset = \"gtx480\"\n[manager]\nmode = \"gpuswap\"\n\
         [[tenant]]\nname = \"a\"\napp = \"nn\"\nsize = \"rodinia\"\n\
         [[tenant]]\nname = \"b\"\napp = \"bfs\"\nsize = \"rodinia\"\n\
         [sweep]\nruns = 2\n[sweep.vary]\n\"device.vram_limit\" = [\"100MiB\", \"200MiB\"]\n",
        &["device.vram_limit"],
        &["results.csv", "summary.csv"],
    );
}

#[test]
fn a_unified_memory_sweep_with_a_baseline_writes_what_the_schema_says() {
    check_sweep(
        "uvm",
        "seed = 1\n[device]\npreset = \"gtx1080ti\"\nsharing = \"mps\"\nsubscription = 1.5\n\
         [manager]\nmode = \"uvm\"\n\
         [[tenant]]\napp = \"bfs\"\nsize = \"rodinia\"\n[[tenant]]\napp = \"pagedos\"\nsize = \"8\"\n\
         [sweep.vary]\ntenant = [[{ app = \"bfs\", size = \"rodinia\" }, { app = \"pagedos\", size = \"8\" }], \
         [{ app = \"nn\", size = \"rodinia\" }, { app = \"pagedos\", size = \"8\" }]]\n\
         scheduler = [{ policy = \"none\" }, { policy = \"amfit\" }]\n\
         [sweep.normalize]\naxis = \"scheduler\"\nnames = [\"mps\", \"amfit\"]\nbaseline = \"mps\"\n\
         metric = \"slowest_phase_ns\"\ncounts = [\"far_faults\"]\n",
        &["tenant", "scheduler"],
        &[
            "results.csv",
            "summary.csv",
            "normalized.csv",
            "patterns.csv",
        ],
    );
}

#[test]
fn a_vm_sweep_writes_what_the_schema_says() {
    let base = std::fs::read_to_string(repo("scenarios/vgpu/fifteen-vms.toml")).unwrap();
    check_sweep(
        "vgpu",
        &format!("{base}\n[sweep.vary]\n\"vm[0].workload\" = [\"lightsmark\", \"nexuiz\"]\n"),
        &["vm[0].workload"],
        &["results.csv", "summary.csv"],
    );
}
