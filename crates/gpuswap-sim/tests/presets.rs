//! Presets snapshot: every field of every preset against `tests/presets.golden`.
//!
//! The presets of a family share a base preset, so editing one figure of the base
//! changes every member of the family at once; this test makes such a change show as a
//! diff of the golden file instead of slipping through. `Debug` prints an `f64` in its
//! shortest round-trip form, so equal text means equal values.
//!
//! After an intended change of a preset, regenerate the file with
//! `GPUSWAP_BLESS=1 cargo test -p gpuswap-sim --test presets` and review its diff.

use std::fmt::Write as _;
use std::path::Path;

#[test]
fn every_preset_matches_its_snapshot() {
    let mut text = String::new();
    for preset in gpuswap_sim::preset::all() {
        writeln!(text, "{preset:#?}").unwrap();
    }
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/presets.golden");
    if std::env::var_os("GPUSWAP_BLESS").is_some() {
        std::fs::write(&golden, &text).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&golden).unwrap();
    if text != expected {
        let (line, (got, want)) = text
            .lines()
            .zip(expected.lines())
            .enumerate()
            .find(|(_, (got, want))| got != want)
            .unwrap_or((
                text.lines().count().min(expected.lines().count()),
                ("<end>", "<end>"),
            ));
        panic!(
            "presets differ from tests/presets.golden at line {}: got `{got}`, want `{want}` \
             (GPUSWAP_BLESS=1 regenerates it after an intended change)",
            line + 1
        );
    }
}
