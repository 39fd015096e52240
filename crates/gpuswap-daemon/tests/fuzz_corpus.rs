//! Replays the wire-protocol fuzz target's corpus (`fuzz/corpus/endpoint/`) on stable:
//! every entry, a finding once or a seed input, must run without a panic or a broken
//! invariant. Seeded random inputs cover the target beyond the corpus.

use std::path::Path;

use gpuswap_daemon::fuzz::drive;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

#[test]
fn the_corpus_replays_without_a_finding() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/endpoint");
    let mut entries = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        drive(&data).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        entries += 1;
    }
    assert!(entries >= 8, "{entries} entries in {}", dir.display());
}

#[test]
fn seeded_random_inputs_find_nothing() {
    for seed in 0..300u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let len = rng.random_range(0..2048usize);
        let data: Vec<u8> = (0..len).map(|_| rng.random()).collect();
        drive(&data).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    }
}
