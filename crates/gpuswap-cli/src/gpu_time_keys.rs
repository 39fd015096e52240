//! The GPU-time keys, read alike from a scenario's `[manager]` table and from
//! `gpuswap daemon --set KEY=VALUE`: `gpu_time`, `quantum`, `handover_after`.

use gpuswap_core::gpu_time::{DEFAULT_HANDOVER_AFTER_NS, GpuTime, Quantum, TurnSettings};
use gpuswap_sim::units::parse_ns;

/// The keys, as users write them.
pub const KEYS: [&str; 3] = ["gpu_time", "quantum", "handover_after"];

/// The settings the keys' values make (`None`: left out), or the key at fault and what
/// was expected.
pub fn settings(
    gpu_time: Option<&str>,
    quantum: Option<&str>,
    handover_after: Option<&str>,
) -> Result<GpuTime, (&'static str, String)> {
    let turns = match gpu_time {
        None | Some("concurrent") => false,
        Some("turns") => true,
        Some(other) => {
            return Err((
                KEYS[0],
                format!(
                    "unknown gpu_time {other:?}; expected one of: {}",
                    GpuTime::NAMES.join(", ")
                ),
            ));
        }
    };
    if !turns {
        for (key, value) in [(KEYS[1], quantum), (KEYS[2], handover_after)] {
            if value.is_some() {
                return Err((key, format!("{key} applies to gpu_time = \"turns\" only")));
            }
        }
        return Ok(GpuTime::Concurrent);
    }
    let quantum = match quantum {
        None | Some("auto") => Quantum::Auto,
        Some(text) => Quantum::Fixed {
            ns: positive(text).ok_or((
                KEYS[1],
                "expected \"auto\" or a positive duration with a unit: ns, us, ms or s".into(),
            ))?,
        },
    };
    let handover_after_ns = match handover_after {
        None => DEFAULT_HANDOVER_AFTER_NS,
        Some(text) => positive(text).ok_or((
            KEYS[2],
            "expected a positive duration with a unit: ns, us, ms or s".into(),
        ))?,
    };
    Ok(GpuTime::Turns(TurnSettings {
        quantum,
        handover_after_ns,
        always: false,
    }))
}

fn positive(text: &str) -> Option<u64> {
    parse_ns(text).ok().filter(|ns| *ns > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn turns_take_their_defaults_and_refuse_what_does_not_apply() {
        assert_eq!(settings(None, None, None), Ok(GpuTime::Concurrent));
        let GpuTime::Turns(t) = settings(Some("turns"), None, None).unwrap() else {
            panic!("turns")
        };
        assert_eq!(t.quantum, Quantum::Auto);
        assert_eq!(t.handover_after_ns, 2_000_000_000);
        assert!(!t.always);
        let GpuTime::Turns(t) = settings(Some("turns"), Some("500ms"), Some("1s")).unwrap() else {
            panic!("turns")
        };
        assert_eq!(t.quantum, Quantum::Fixed { ns: 500_000_000 });
        assert_eq!(t.handover_after_ns, 1_000_000_000);
        assert_eq!(
            settings(Some("both"), None, None).unwrap_err().0,
            "gpu_time"
        );
        assert_eq!(settings(None, Some("1s"), None).unwrap_err().0, "quantum");
        assert_eq!(
            settings(Some("turns"), Some("0s"), None).unwrap_err().0,
            "quantum"
        );
        assert_eq!(
            settings(Some("turns"), None, Some("soon")).unwrap_err().0,
            "handover_after"
        );
    }
}
