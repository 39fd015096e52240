//! `gpuswap profile` end to end: the files it writes, a scenario that reads its
//! priorities, and bad flags.

use std::path::PathBuf;
use std::process::{Command, Output};

use gpuswap_sim::{apps, preset, runtime};

fn gpuswap(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gpuswap"))
        .args(args)
        .output()
        .expect("the binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).expect("utf-8 output")
}

/// A fresh, empty directory for one test.
fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "gpuswap-profile-test-{}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Labels and sizes of nn's buffers at the rodinia size with the runtime's buffers, in
/// allocation order (the runtime's first).
fn nn_buffers() -> Vec<(String, u64)> {
    let gtx480 = preset::find("gtx480").unwrap();
    let program = apps::find("nn")
        .unwrap()
        .program("rodinia", 1, gtx480.shape())
        .unwrap();
    runtime::with_runtime(&program, &gtx480)
        .buffers
        .into_iter()
        .map(|b| (b.label, b.bytes))
        .collect()
}

#[test]
fn profile_writes_units_plot_and_priorities_that_a_scenario_runs_with() {
    let dir = temp_dir("nn");
    let out = dir.join("nn-profile");
    let out_arg = out.to_str().unwrap();
    let run = gpuswap(&[
        "profile",
        "nn",
        "--size",
        "rodinia",
        "--granularity",
        "page",
        "--out",
        out_arg,
        "--png",
    ]);
    assert!(run.status.success(), "{}", text(&run.stderr));
    let summary = text(&run.stdout);
    for needle in [
        "access profile: nn (rodinia), page granularity",
        "repetitions",
        "slowdown",
        "accesses/page",
        "locations",
        "units.csv",
        "priorities.toml",
    ] {
        assert!(summary.contains(needle), "{needle:?} in\n{summary}");
    }

    // One row per 4 KiB page of every buffer, in allocation order, tiling each buffer.
    let buffers = nn_buffers();
    let mut csv = csv::Reader::from_path(out.join("units.csv")).unwrap();
    assert_eq!(
        csv.headers().unwrap(),
        vec!["buffer", "offset_bytes", "bytes", "reads", "writes"]
    );
    let rows: Vec<csv::StringRecord> = csv.records().map(Result::unwrap).collect();
    let pages: u64 = buffers.iter().map(|(_, bytes)| bytes.div_ceil(4096)).sum();
    assert_eq!(rows.len() as u64, pages);
    let mut expected = buffers.iter().flat_map(|(label, bytes)| {
        (0..bytes.div_ceil(4096)).map(move |page| (label.clone(), page * 4096))
    });
    for row in &rows {
        let (label, offset) = expected.next().unwrap();
        assert_eq!(
            (&row[0], row[1].parse::<u64>().unwrap()),
            (label.as_str(), offset)
        );
        assert!(row[3].parse::<f64>().unwrap() >= 0.0 && row[4].parse::<f64>().unwrap() >= 0.0);
    }
    // nn's input is only read, its output only written.
    let sum = |label: &str, column: usize| -> f64 {
        rows.iter()
            .filter(|r| &r[0] == label)
            .map(|r| r[column].parse::<f64>().unwrap())
            .sum()
    };
    assert!(sum("locations", 3) > 0.0 && sum("locations", 4) == 0.0);
    assert!(sum("distances", 3) == 0.0 && sum("distances", 4) > 0.0);

    // The priorities file: every buffer, priorities 1..=n, one chunk priority per 4 MiB
    // chunk.
    let toml_text = std::fs::read_to_string(out.join("priorities.toml")).unwrap();
    let file: toml::Table = toml::from_str(&toml_text).unwrap();
    assert_eq!(file["app"].as_str(), Some("nn"));
    assert_eq!(file["size"].as_str(), Some("rodinia"));
    assert_eq!(file["granularity"].as_str(), Some("page"));
    let priorities = file["priorities"].as_table().unwrap();
    let mut labels: Vec<&str> = priorities.keys().map(String::as_str).collect();
    let mut expected_labels: Vec<&str> = buffers.iter().map(|(l, _)| l.as_str()).collect();
    labels.sort_unstable();
    expected_labels.sort_unstable();
    assert_eq!(labels, expected_labels);
    let mut values: Vec<i64> = priorities
        .values()
        .map(|v| v.as_integer().unwrap())
        .collect();
    values.sort_unstable();
    assert_eq!(values, (1..=buffers.len() as i64).collect::<Vec<_>>());
    // Equal accesses per page (coalesced reads and writes alike): the tie goes to the
    // buffer allocated first.
    assert!(priorities["locations"].as_integer() > priorities["distances"].as_integer());
    let chunks = file["chunk_priorities"].as_table().unwrap();
    for (label, bytes) in &buffers {
        let list = chunks[label.as_str()].as_array().unwrap();
        assert_eq!(list.len() as u64, bytes.div_ceil(4 << 20), "{label}");
    }

    let svg = std::fs::read_to_string(out.join("profile.svg")).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.len() > 5_000,
        "{} bytes",
        svg.len()
    );
    assert!(svg.contains("access profile: nn (rodinia), page granularity"));
    let png = std::fs::read(out.join("profile.png")).unwrap();
    assert!(png.starts_with(b"\x89PNG") && png.len() > 5_000);

    // A scenario that reads the file runs, with less VRAM than the stack alone needs, so
    // that the priority-buffer policy has chunks to choose.
    let scenario = dir.join("nn.toml");
    std::fs::write(
        &scenario,
        "[device]\nvram_limit = \"32MiB\"\n[manager]\nmode = \"gpuswap\"\n\
         chunk_policy = \"priority-buffer\"\n[[tenant]]\napp = \"nn\"\nsize = \"rodinia\"\n\
         priorities_file = \"nn-profile/priorities.toml\"\n",
    )
    .unwrap();
    let run = gpuswap(&["run", scenario.to_str().unwrap()]);
    assert!(run.status.success(), "{}", text(&run.stderr));
    assert!(text(&run.stdout).contains("nn0"), "{}", text(&run.stdout));
}

#[test]
fn buffer_granularity_writes_one_row_per_buffer_and_no_chunk_priorities() {
    let dir = temp_dir("buffer");
    let run = gpuswap(&[
        "profile",
        "backprop",
        "--size",
        "rodinia",
        "--granularity",
        "buffer",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(run.status.success(), "{}", text(&run.stderr));
    let rows = csv::Reader::from_path(dir.join("units.csv"))
        .unwrap()
        .records()
        .count();
    assert_eq!(rows, 9, "six app buffers and three runtime buffers");
    let file: toml::Table =
        toml::from_str(&std::fs::read_to_string(dir.join("priorities.toml")).unwrap()).unwrap();
    assert_eq!(file["priorities"].as_table().unwrap().len(), 9);
    assert!(
        file.get("chunk_priorities")
            .and_then(|c| c.as_table())
            .is_none_or(|c| c.is_empty())
    );
}

#[test]
fn bad_flags_exit_2_naming_the_flag_and_write_nothing() {
    let dir = temp_dir("bad");
    let out = dir.join("never");
    let out_arg = out.to_str().unwrap();
    for (args, fragments) in [
        (
            vec!["nope"],
            vec!["APP", "unknown app \"nope\"", "backprop"],
        ),
        (
            vec!["nn", "--size", "huge"],
            vec!["--size", "\"huge\" is not a size", "rodinia"],
        ),
        (
            vec!["nn", "--preset", "gtx9000"],
            vec!["--preset", "unknown preset", "gtx480"],
        ),
        (
            vec!["nn", "--chunk-size", "4XB"],
            vec!["--chunk-size", "not a size", "MiB"],
        ),
        (
            vec!["nn", "--chunk-size", "1KiB"],
            vec!["--chunk-size", "at least 4KiB"],
        ),
        (
            vec!["nn", "--granularity", "word"],
            vec!["--granularity", "page", "chunk", "buffer"],
        ),
    ] {
        let mut all = vec!["profile", "--out", out_arg];
        all.extend(&args);
        let run = gpuswap(&all);
        let stderr = text(&run.stderr);
        assert_eq!(run.status.code(), Some(2), "{args:?}: {stderr}");
        for fragment in fragments {
            assert!(
                stderr.contains(fragment),
                "{args:?}: {fragment:?} in {stderr}"
            );
        }
        assert!(!out.exists(), "{args:?} wrote {}", out.display());
    }
}
