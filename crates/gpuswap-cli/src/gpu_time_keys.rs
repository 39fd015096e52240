//! The GPU-time keys, read alike from a scenario's `[manager]` table and from
//! `gpuswap daemon --set KEY=VALUE`: `gpu_time`, `quantum`, `handover_after`,
//! `remote_cost`, `idle`, `demote_after`.

use gpuswap_core::gpu_time::{
    AutoSettings, DEFAULT_DEMOTE_AFTER_NS, DEFAULT_HANDOVER_AFTER_NS, GpuTime, Idle, Quantum,
    TurnSettings,
};
use gpuswap_sim::units::parse_ns;

/// The keys, as users write them.
pub const KEYS: [&str; 6] = [
    "gpu_time",
    "quantum",
    "handover_after",
    "remote_cost",
    "idle",
    "demote_after",
];

/// Where `remote_cost` is in [`KEYS`] and [`Values`].
pub const REMOTE_COST: usize = 3;

/// The keys' values as written (`None`: left out), in [`KEYS`]' order.
pub type Values<'a> = [Option<&'a str>; 6];

/// What the keys leave to their reader: the `gpu_time` when none is given, and the
/// link's remote-read cost when `remote_cost` is not given.
#[derive(Clone, Copy, Debug)]
pub struct Defaults {
    /// `concurrent` in scenarios (the papers' systems shared), `auto` in the daemon.
    pub gpu_time: &'static str,
    /// A remote read against a local one: the preset's in the simulator.
    pub remote_cost: f64,
}

/// The settings the keys' values make, or the key at fault and what was expected.
/// `idle` is `demote` by default where tenants report busy and idle (turns, auto),
/// `keep` under concurrent time.
pub fn settings(
    values: Values,
    defaults: Defaults,
) -> Result<(GpuTime, Idle), (&'static str, String)> {
    debug_assert_eq!(KEYS[REMOTE_COST], "remote_cost");
    let [
        gpu_time,
        quantum,
        handover_after,
        remote_cost,
        idle,
        demote_after,
    ] = values;
    let name = gpu_time.unwrap_or(defaults.gpu_time);
    if !GpuTime::NAMES.contains(&name) {
        return Err((
            KEYS[0],
            format!(
                "unknown gpu_time {name:?}; expected one of: {}",
                GpuTime::NAMES.join(", ")
            ),
        ));
    }
    let takes_turns = name != "concurrent";
    if !takes_turns {
        for (key, value) in [(KEYS[1], quantum), (KEYS[2], handover_after)] {
            if value.is_some() {
                return Err((
                    key,
                    format!("{key} applies to gpu_time = \"turns\" or \"auto\" only"),
                ));
            }
        }
    }
    if name != "auto" && remote_cost.is_some() {
        return Err((
            KEYS[3],
            "remote_cost applies to gpu_time = \"auto\" only".into(),
        ));
    }
    let idle = idle_settings(idle, demote_after, takes_turns)?;
    let turns = TurnSettings {
        quantum: match quantum {
            None | Some("auto") => Quantum::Auto,
            Some(text) => Quantum::Fixed {
                ns: positive(text).ok_or((
                    KEYS[1],
                    "expected \"auto\" or a positive duration with a unit: ns, us, ms or s".into(),
                ))?,
            },
        },
        handover_after_ns: match handover_after {
            None => DEFAULT_HANDOVER_AFTER_NS,
            Some(text) => positive(text).ok_or((KEYS[2], DURATION.into()))?,
        },
        always: false,
    };
    let gpu_time = match name {
        "concurrent" => GpuTime::Concurrent,
        "turns" => GpuTime::Turns(turns),
        _ => {
            let cost = match remote_cost {
                None => defaults.remote_cost,
                Some(text) => text
                    .parse::<f64>()
                    .ok()
                    .filter(|c| c.is_finite() && *c >= 1.0)
                    .ok_or((
                        KEYS[3],
                        format!(
                            "expected a number of at least 1 (a remote read against a local one), not {text:?}"
                        ),
                    ))?,
            };
            GpuTime::Auto(AutoSettings::from_remote_cost(turns, cost))
        }
    };
    Ok((gpu_time, idle))
}

/// The `idle` and `demote_after` keys.
fn idle_settings(
    idle: Option<&str>,
    demote_after: Option<&str>,
    takes_turns: bool,
) -> Result<Idle, (&'static str, String)> {
    let demote = match idle {
        None => takes_turns,
        Some("keep") => false,
        Some("demote") => true,
        Some(other) => {
            return Err((
                KEYS[4],
                format!(
                    "unknown idle {other:?}; expected one of: {}",
                    Idle::NAMES.join(", ")
                ),
            ));
        }
    };
    if !demote {
        return match demote_after {
            Some(_) => Err((
                KEYS[5],
                "demote_after applies to idle = \"demote\" only".into(),
            )),
            None => Ok(Idle::Keep),
        };
    }
    Ok(Idle::Demote {
        after_ns: match demote_after {
            None => DEFAULT_DEMOTE_AFTER_NS,
            Some(text) => positive(text).ok_or((KEYS[5], DURATION.into()))?,
        },
    })
}

const DURATION: &str = "expected a positive duration with a unit: ns, us, ms or s";

fn positive(text: &str) -> Option<u64> {
    parse_ns(text).ok().filter(|ns| *ns > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SIM: Defaults = Defaults {
        gpu_time: "concurrent",
        remote_cost: 74.0,
    };

    fn one(key: &str, value: &str) -> Values<'static> {
        let mut v: Values = [None; 6];
        let at = KEYS.iter().position(|k| *k == key).unwrap();
        v[at] = Some(Box::leak(value.to_owned().into_boxed_str()));
        v
    }

    fn with(mut v: Values<'static>, key: &str, value: &'static str) -> Values<'static> {
        v[KEYS.iter().position(|k| *k == key).unwrap()] = Some(value);
        v
    }

    #[test]
    fn turns_take_their_defaults_and_refuse_what_does_not_apply() {
        assert_eq!(
            settings([None; 6], SIM),
            Ok((GpuTime::Concurrent, Idle::Keep))
        );
        let (GpuTime::Turns(t), idle) = settings(one("gpu_time", "turns"), SIM).unwrap() else {
            panic!("turns")
        };
        assert_eq!(t.quantum, Quantum::Auto);
        assert_eq!(t.handover_after_ns, 2_000_000_000);
        assert!(!t.always);
        assert_eq!(
            idle,
            Idle::Demote {
                after_ns: 5_000_000_000
            }
        );
        let v = with(
            with(one("gpu_time", "turns"), "quantum", "500ms"),
            "handover_after",
            "1s",
        );
        let (GpuTime::Turns(t), _) = settings(v, SIM).unwrap() else {
            panic!("turns")
        };
        assert_eq!(t.quantum, Quantum::Fixed { ns: 500_000_000 });
        assert_eq!(t.handover_after_ns, 1_000_000_000);
        assert_eq!(
            settings(one("gpu_time", "both"), SIM).unwrap_err().0,
            "gpu_time"
        );
        assert_eq!(
            settings(one("quantum", "1s"), SIM).unwrap_err().0,
            "quantum"
        );
        let v = with(one("gpu_time", "turns"), "quantum", "0s");
        assert_eq!(settings(v, SIM).unwrap_err().0, "quantum");
        let v = with(one("gpu_time", "turns"), "handover_after", "soon");
        assert_eq!(settings(v, SIM).unwrap_err().0, "handover_after");
    }

    #[test]
    fn auto_starts_from_the_links_remote_cost_and_idle_keys_are_checked() {
        let (GpuTime::Auto(a), _) = settings(one("gpu_time", "auto"), SIM).unwrap() else {
            panic!("auto")
        };
        assert!(!a.share_first, "PCIe's cost: turns first");
        let v = with(one("gpu_time", "auto"), "remote_cost", "9");
        let (GpuTime::Auto(a), _) = settings(v, SIM).unwrap() else {
            panic!("auto")
        };
        assert!(a.share_first, "a Grace-Hopper-like link: sharing first");
        let daemon = Defaults {
            gpu_time: "auto",
            remote_cost: 240.0,
        };
        assert!(matches!(
            settings([None; 6], daemon),
            Ok((GpuTime::Auto(_), Idle::Demote { .. }))
        ));
        for (key, value) in [
            ("remote_cost", "0.5"),
            ("remote_cost", "NaN"),
            ("idle", "sleep"),
        ] {
            let v = with(one("gpu_time", "auto"), key, value);
            assert_eq!(settings(v, SIM).unwrap_err().0, key, "{key} = {value}");
        }
        assert_eq!(
            settings(one("remote_cost", "9"), SIM).unwrap_err().0,
            "remote_cost"
        );
        assert_eq!(
            settings(one("demote_after", "1s"), SIM).unwrap_err().0,
            "demote_after"
        );
        let v = with(one("idle", "demote"), "demote_after", "1s");
        assert_eq!(
            settings(v, SIM),
            Ok((
                GpuTime::Concurrent,
                Idle::Demote {
                    after_ns: 1_000_000_000
                }
            ))
        );
        let v = with(one("gpu_time", "auto"), "idle", "keep");
        assert_eq!(settings(v, SIM).unwrap().1, Idle::Keep);
    }
}
