//! The registry: every memory policy (manager mode), victim policy, chunk policy and
//! scheduler, each registered once with its name, description, typed parameters, what it
//! needs from the device, and its constructor. Scenario parsing, listings and reports
//! iterate these tables; a new policy is one file plus one line here.

use thiserror::Error;

use crate::contract::{Term, Terms};
use crate::gpu_time::launch_gate::{SCHEDULERS, Scheduler, SchedulerSettings};
use crate::params::{ACCESS_COUNTS, KERNEL_ESTIMATES, Needs, Registered};
pub use crate::params::{Choice, ParamDefault, ParamKind, ParamSpec, ParamValue};
use crate::policy::gpuswap::Gpuswap;
use crate::policy::gpuswap::chunk::CHUNKS;
use crate::policy::gpuswap::victim::VICTIMS;
use crate::policy::{MemoryPolicy, fcfs, gdev, native, static_share, uvm};
use crate::uvm::policy::Runtime;
use crate::uvm::thrash::ThrashingParams;
use crate::uvm::{Migration, PagingConfig, Victim};

/// What a policy is built for besides its settings.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Budget {
    /// VRAM the manager may hand to tenants.
    pub(crate) vram_bytes: u64,
    /// Period of the return check.
    pub(crate) return_interval_ns: u64,
    /// The run's seed, for policies that choose at random.
    pub(crate) seed: u64,
}

/// A registered memory policy (a manager mode).
pub struct PolicyEntry {
    /// Name, description and needs.
    pub choice: Choice,
    /// Its parameters.
    pub params: &'static [ParamSpec],
    /// The scheduler it runs with.
    pub scheduler: &'static str,
    /// The contract terms it has a meaning for; a tenant whose contract sets another
    /// is refused ([`crate::Manager::handle_tenant_start`]).
    pub honours: Terms,
    /// Of those, terms it honours only with a parameter at one value.
    pub honours_only_with: &'static [Condition],
    /// Whether it can take VRAM back from a tenant (evict): then guarantees are kept by
    /// choosing victims, and admitted up to VRAM in all; otherwise by reserving them.
    pub reclaims: bool,
    build: fn(&PolicySettings, Budget) -> Box<dyn MemoryPolicy>,
}

const VICTIM_PARAM: ParamSpec = ParamSpec {
    key: "victim",
    help: "who gives up memory",
    kind: ParamKind::Choice(|| VICTIMS.iter().map(|v| v.choice).collect()),
    default: ParamDefault::Choice("largest-share"),
};

const CHUNK_PARAM: ParamSpec = ParamSpec {
    key: "chunk_policy",
    help: "which chunk a victim gives up",
    kind: ParamKind::Choice(|| CHUNKS.iter().map(|c| c.choice).collect()),
    default: ParamDefault::Choice("priority-buffer"),
};

const PREFETCH_PARAM: ParamSpec = ParamSpec {
    key: "prefetch",
    help: "what a fault batch migrates besides the faulted pages",
    kind: ParamKind::Choice(|| {
        crate::uvm::prefetch::PREFETCHERS
            .iter()
            .map(|p| p.choice)
            .collect()
    }),
    default: ParamDefault::Choice("tree"),
};

const EVICTION_PARAM: ParamSpec = ParamSpec {
    key: "eviction",
    help: "what leaves VRAM when a migration needs room",
    kind: ParamKind::Choice(|| {
        crate::uvm::evict::EVICTIONS
            .iter()
            .map(|e| {
                // An order kept by use needs the device's notes of resident touches.
                let choice = e.choice;
                if (e.build)().observes_touches() {
                    choice.needing(ACCESS_COUNTS)
                } else {
                    choice
                }
            })
            .collect()
    }),
    default: ParamDefault::Choice("fifo-2mb"),
};

const MIGRATION_PARAM: ParamSpec = ParamSpec {
    key: "migration",
    help: "when a touched page not in VRAM migrates",
    kind: ParamKind::Choice(|| {
        vec![
            Choice::new("on-fault", "on its first far fault (the driver's default)"),
            Choice::new(
                "delayed",
                "reads are served remotely until the 2 MiB block's access counter reaches migrate_threshold; writes migrate at once",
            )
            .needing(ACCESS_COUNTS),
            Choice::new(
                "zero-copy",
                "never: host memory mapped for the GPU, every access remote",
            ),
        ]
    }),
    default: ParamDefault::Choice("on-fault"),
};

const MIGRATE_THRESHOLD_PARAM: ParamSpec = ParamSpec {
    key: "migrate_threshold",
    help: "remote reads of a 2 MiB block before delayed migration moves it (the research simulator's GTX 1080 Ti configuration: 8)",
    kind: ParamKind::Count,
    default: ParamDefault::Count(8),
};

const ADAPTIVE_THRESHOLD_PARAM: ParamSpec = ParamSpec {
    key: "adaptive_threshold",
    help: "once memory is oversubscribed, delayed migration's threshold grows with the block's evictions (x 2 x (round trips + 1))",
    kind: ParamKind::Choice(|| {
        vec![
            Choice::new("false", "a fixed threshold"),
            Choice::new("true", "the research simulator's dynamic threshold"),
        ]
    }),
    default: ParamDefault::Choice("false"),
};

const INVALIDATE_CLEAN_PARAM: ParamSpec = ParamSpec {
    key: "invalidate_clean",
    help: "evicted pages no kernel wrote are dropped instead of copied back to the host",
    kind: ParamKind::Choice(|| {
        vec![
            Choice::new(
                "false",
                "every evicted page is copied back (the driver's behaviour)",
            ),
            Choice::new(
                "true",
                "clean pages are dropped; only written ones are copied",
            ),
        ]
    }),
    default: ParamDefault::Choice("false"),
};

const UVM_VICTIM_PARAM: ParamSpec = ParamSpec {
    key: "victim",
    help: "whose pages make room when a migration needs it",
    kind: ParamKind::Choice(|| {
        vec![
            Choice::new(
                "any",
                "the eviction policy's choice among every tenant's pages (the driver has no notion of tenants)",
            ),
            Choice::new(
                "largest-share",
                "the tenant with the most pages in VRAM, then the eviction policy's order within its pages",
            ),
        ]
    }),
    default: ParamDefault::Choice("any"),
};

const THRASHING_PARAM: ParamSpec = ParamSpec {
    key: "thrashing",
    help: "the driver's thrashing detection: throttle pages that bounce within 500 us, pin them in host memory after 10 throttles",
    kind: ParamKind::Choice(|| {
        vec![
            Choice::new("true", "on, with the driver's defaults"),
            Choice::new("false", "off"),
        ]
    }),
    default: ParamDefault::Choice("true"),
};

const RUNTIME_PARAM: ParamSpec = ParamSpec {
    key: "policy",
    help: "who chooses each managed allocation's paging: the settings above, or the adaptive runtime from the allocation's detected migration pattern",
    kind: ParamKind::Choice(|| {
        vec![
            Choice::new(
                "fixed",
                "every allocation as prefetch, eviction and migration say",
            ),
            // Both order evicted pages by use (the tree order); the trials compare
            // kernels' times with their all-in-VRAM estimates.
            Choice::new(
                "adaptive",
                "per allocation: regular gets tree prefetch and tree eviction, random remote access once oversubscribed, mixed delayed migration with the dynamic threshold; streaming keeps the settings",
            )
            .needing(ACCESS_COUNTS.union(KERNEL_ESTIMATES)),
            Choice::new(
                "adaptive-coarse",
                "the research simulator's runtime: one switch for every allocation (any random or mixed: delayed migration and tree eviction; else any regular: tree eviction)",
            )
            .needing(ACCESS_COUNTS),
        ]
    }),
    default: ParamDefault::Choice("fixed"),
};

const TENANTS_PARAM: ParamSpec = ParamSpec {
    key: "tenants",
    help: "the parts VRAM is cut into; a tenant may hold as many as its weight (default: the tenants' total weight)",
    kind: ParamKind::Count,
    default: ParamDefault::TenantCount,
};

/// The key of Gdev's launch limit.
const LAUNCH_LIMIT_KEY: &str = "launch_limit";

/// Gdev's `GDEV_INSTANCES_LIMIT` (`gdev_schedule_compute`, `common/gdev_sched.c`,
/// `shinpei0208/gdev`): 32 in mainline (`common/gdev_sched.h`), 1 in some forks. The
/// default, 1, is the setting every run before this parameter had; which one the
/// GPUswap testbed ran is not given by the papers.
const LAUNCH_LIMIT_PARAM: ParamSpec = ParamSpec {
    key: LAUNCH_LIMIT_KEY,
    help: "launches the current context may have in flight; other contexts wait until it has none (Gdev's GDEV_INSTANCES_LIMIT: 32 in mainline, 1 in some forks)",
    kind: ParamKind::Count,
    default: ParamDefault::Count(1),
};

/// Contract terms a mode honours only when one of its parameters has one value.
pub struct Condition {
    /// The terms.
    pub terms: Terms,
    /// The parameter.
    pub key: &'static str,
    /// Its value.
    pub value: &'static str,
}

/// The terms of the modes that split a buffer between VRAM and host memory and never
/// evict: a guarantee is reserved, limits cap the split; no victims, so no classes, and
/// no shares to weigh.
const SPLIT_TERMS: Terms = Terms::of(&Term::ALL)
    .without(Term::Weight)
    .without(Term::PriorityClass);

/// Every memory policy, in the order listings show them; `native` is the default.
pub static POLICIES: &[PolicyEntry] = &[
    PolicyEntry {
        choice: Choice::new(
            "native",
            "a stock driver: allocations come from VRAM while it lasts, then fail",
        ),
        params: &[],
        scheduler: "pass-through",
        honours: Terms::of(&[Term::VramGuarantee, Term::MemoryLimit, Term::Wait]),
        reclaims: false,
        honours_only_with: &[],
        build: |_, _| Box::new(native::Native),
    },
    PolicyEntry {
        choice: Choice::new(
            "gpuswap",
            "GPUswap: evict chunks of a victim to host memory and remap them; return them when VRAM frees up",
        )
        .needing(Needs {
            timers: true,
            ..Needs::NONE
        }),
        params: &[VICTIM_PARAM, CHUNK_PARAM],
        scheduler: "pass-through",
        honours: Terms::of(&Term::ALL),
        reclaims: true,
        honours_only_with: &[],
        build: |settings, budget| {
            let victim = Registered::find(VICTIMS, settings.choice("victim")).expect("validated");
            let chunk = Registered::find(CHUNKS, settings.choice("chunk_policy")).expect("validated");
            let victim = (victim.build)();
            Box::new(Gpuswap {
                wants_access_rates: victim.wants_access_rates(),
                victim,
                chunk: (chunk.build)(),
                return_interval_ns: budget.return_interval_ns,
                last_check_ns: 0,
            })
        },
    },
    PolicyEntry {
        choice: Choice::new(
            "fcfs",
            "first come, first served: chunks beyond free VRAM go to host memory and stay",
        ),
        params: &[],
        scheduler: "pass-through",
        honours: SPLIT_TERMS,
        reclaims: false,
        honours_only_with: &[],
        build: |_, _| Box::new(fcfs::Fcfs),
    },
    PolicyEntry {
        choice: Choice::new(
            "static",
            "static partitioning: each of n tenants may hold 1/n of VRAM, the rest goes to host memory",
        ),
        params: &[TENANTS_PARAM],
        scheduler: "pass-through",
        honours: SPLIT_TERMS.with(Term::Weight),
        reclaims: false,
        honours_only_with: &[],
        build: |settings, _| {
            Box::new(static_share::StaticShare {
                tenants: settings.count("tenants"),
            })
        },
    },
    PolicyEntry {
        choice: Choice::new(
            "uvm",
            "unified memory: managed allocations start in host memory; kernels fault pages in, batch by batch, with a prefetcher and an eviction policy",
        )
        .needing(Needs {
            page_faults: true,
            ..Needs::NONE
        }),
        params: &[
            PREFETCH_PARAM,
            EVICTION_PARAM,
            UVM_VICTIM_PARAM,
            MIGRATION_PARAM,
            MIGRATE_THRESHOLD_PARAM,
            ADAPTIVE_THRESHOLD_PARAM,
            THRASHING_PARAM,
            INVALIDATE_CLEAN_PARAM,
            RUNTIME_PARAM,
        ],
        scheduler: "pass-through",
        // No driver runs it for processes that could wait (the daemon refuses paging).
        honours: Terms::of(&[
            Term::MemoryLimit,
            Term::VramGuarantee,
            Term::VramLimit,
            Term::Weight,
            Term::PriorityClass,
        ]),
        reclaims: true,
        // The driver's victim knows no tenants; the page terms need one per tenant.
        honours_only_with: &[Condition {
            terms: Terms::of(&[
                Term::VramGuarantee,
                Term::VramLimit,
                Term::Weight,
                Term::PriorityClass,
            ]),
            key: "victim",
            value: "largest-share",
        }],
        build: |settings, budget| {
            Box::new(uvm::Uvm::new(
                paging_config(settings, budget.seed),
                budget.vram_bytes,
            ))
        },
    },
    PolicyEntry {
        choice: Choice::new(
            "gdev",
            "Gdev: whole buffers; before each launch the launcher's buffers are swapped in whole",
        )
        .needing(Needs {
            launch_gating: true,
            ..Needs::NONE
        }),
        params: &[LAUNCH_LIMIT_PARAM],
        scheduler: "gdev",
        // No driver runs it for processes that could wait (the daemon refuses launch gating).
        honours: Terms::of(&[Term::MemoryLimit, Term::PriorityClass]),
        reclaims: false,
        honours_only_with: &[],
        build: |_, _| Box::<gdev::Gdev>::default(),
    },
];

/// The typed configuration of the paging machine, from validated settings.
fn paging_config(settings: &PolicySettings, seed: u64) -> PagingConfig {
    let flag = |key| settings.choice(key) == "true";
    let prefetch =
        crate::uvm::prefetch::find_prefetch(settings.choice("prefetch")).expect("validated");
    let eviction =
        crate::uvm::evict::find_eviction(settings.choice("eviction")).expect("validated");
    let migrate_threshold = u32::try_from(settings.count("migrate_threshold")).unwrap_or(u32::MAX);
    let migration = match settings.choice("migration") {
        "on-fault" => Migration::OnFault,
        "delayed" => Migration::Delayed {
            threshold: migrate_threshold,
            adaptive: flag("adaptive_threshold"),
        },
        "zero-copy" => Migration::ZeroCopy,
        other => unreachable!("migration {other:?} passed validation"),
    };
    PagingConfig {
        prefetch: (prefetch.build)(),
        eviction: eviction.build,
        migration,
        thrashing: flag("thrashing").then(ThrashingParams::default),
        invalidate_clean: flag("invalidate_clean"),
        victim: match settings.choice("victim") {
            "any" => Victim::Any,
            "largest-share" => Victim::LargestShare,
            other => unreachable!("victim {other:?} passed validation"),
        },
        runtime: match settings.choice("policy") {
            "fixed" => Runtime::Fixed,
            "adaptive" => Runtime::Adaptive { migrate_threshold },
            "adaptive-coarse" => Runtime::AdaptiveCoarse { migrate_threshold },
            other => unreachable!("policy {other:?} passed validation"),
        },
        seed,
    }
}

/// The policy called `name`.
pub fn find_policy(name: &str) -> Option<&'static PolicyEntry> {
    POLICIES.iter().find(|p| p.choice.name == name)
}

/// The scheduler a policy runs with.
pub(crate) fn build_scheduler(settings: &PolicySettings) -> Box<dyn Scheduler> {
    let scheduler = Registered::find(SCHEDULERS, settings.entry().scheduler)
        .expect("every policy names a registered scheduler");
    let has_limit = settings
        .entry()
        .params
        .iter()
        .any(|p| p.key == LAUNCH_LIMIT_KEY);
    (scheduler.build)(SchedulerSettings {
        launch_limit: if has_limit {
            settings.count(LAUNCH_LIMIT_KEY)
        } else {
            1
        },
    })
}

/// Every registered scheduler.
pub fn schedulers() -> Vec<Choice> {
    SCHEDULERS.iter().map(|s| s.choice).collect()
}

/// Why settings were refused; the message names what was expected.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum SettingsError {
    /// No such policy.
    #[error("unknown mode {name:?}; expected one of: {}", expected.join(", "))]
    UnknownPolicy {
        /// What was asked for.
        name: String,
        /// The registered names.
        expected: Vec<&'static str>,
    },
    /// The policy has no such parameter.
    #[error("mode {policy:?} takes no setting {key:?}; {}", if expected.is_empty() { "it takes none".to_owned() } else { format!("expected one of: {}", expected.join(", ")) })]
    UnknownKey {
        /// The policy.
        policy: &'static str,
        /// The key.
        key: String,
        /// The keys it takes.
        expected: Vec<&'static str>,
    },
    /// A value the parameter does not take.
    #[error("{value:?} is not a valid {key}; expected {expected}")]
    BadValue {
        /// The key.
        key: &'static str,
        /// The value given.
        value: String,
        /// What it takes.
        expected: String,
    },
}

/// A chosen policy with a value for each of its parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicySettings {
    name: &'static str,
    values: Vec<(&'static str, ParamValue)>,
}

impl PolicySettings {
    /// The policy `name` with its defaults, for a scenario of `tenants` tenants.
    pub fn new(name: &str, tenants: u32) -> Result<Self, SettingsError> {
        let entry = find_policy(name).ok_or_else(|| SettingsError::UnknownPolicy {
            name: name.to_owned(),
            expected: POLICIES.iter().map(|p| p.choice.name).collect(),
        })?;
        let values = entry
            .params
            .iter()
            .map(|p| {
                let value = match p.default {
                    ParamDefault::Choice(c) => ParamValue::Choice(c),
                    ParamDefault::TenantCount => ParamValue::Count(u64::from(tenants.max(1))),
                    ParamDefault::Count(n) => ParamValue::Count(n),
                };
                (p.key, value)
            })
            .collect();
        Ok(Self {
            name: entry.choice.name,
            values,
        })
    }

    /// A built-in policy with its defaults (for tests and examples).
    ///
    /// # Panics
    /// If `name` is not registered.
    pub fn named(name: &str) -> Self {
        Self::new(name, 1).unwrap_or_else(|e| panic!("{e}"))
    }

    /// These settings with `key` set from its text form.
    pub fn set(mut self, key: &str, value: &str) -> Result<Self, SettingsError> {
        let entry = self.entry();
        let spec = entry.params.iter().find(|p| p.key == key).ok_or_else(|| {
            SettingsError::UnknownKey {
                policy: self.name,
                key: key.to_owned(),
                expected: entry.params.iter().map(|p| p.key).collect(),
            }
        })?;
        let parsed = match spec.kind {
            ParamKind::Choice(options) => {
                let options = options();
                let found = options.iter().find(|c| c.name == value);
                found.map(|c| ParamValue::Choice(c.name)).ok_or_else(|| {
                    let names: Vec<_> = options.iter().map(|c| c.name).collect();
                    format!("one of: {}", names.join(", "))
                })
            }
            ParamKind::Count => value
                .parse::<u64>()
                .ok()
                .filter(|n| *n > 0)
                .map(ParamValue::Count)
                .ok_or_else(|| "a positive whole number".to_owned()),
        };
        let parsed = parsed.map_err(|expected| SettingsError::BadValue {
            key: spec.key,
            value: value.to_owned(),
            expected,
        })?;
        let slot = self.values.iter_mut().find(|(k, _)| *k == spec.key);
        slot.expect("every parameter has a value").1 = parsed;
        Ok(self)
    }

    /// [`PolicySettings::set`] for settings known to be valid (tests and examples).
    ///
    /// # Panics
    /// If the key or value is not valid for the policy.
    pub fn with(self, key: &str, value: &str) -> Self {
        self.set(key, value).unwrap_or_else(|e| panic!("{e}"))
    }

    /// The policy's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The contract terms the mode honours with these parameters.
    pub fn honours(&self) -> Terms {
        let entry = self.entry();
        entry
            .honours_only_with
            .iter()
            .filter(|c| self.choice(c.key) != c.value)
            .fold(entry.honours, |t, c| {
                c.terms.iter().fold(t, |t, term| t.without(term))
            })
    }

    /// The registry entry of its mode.
    pub fn entry(&self) -> &'static PolicyEntry {
        find_policy(self.name).expect("settings name a registered policy")
    }

    /// Every parameter with its value.
    pub fn values(&self) -> &[(&'static str, ParamValue)] {
        &self.values
    }

    /// The value of a choice parameter.
    ///
    /// # Panics
    /// If the policy has no such choice parameter (a bug in a policy's constructor).
    pub fn choice(&self, key: &str) -> &'static str {
        match self.value(key) {
            ParamValue::Choice(c) => c,
            ParamValue::Count(_) => panic!("{key} is a count"),
        }
    }

    /// The value of a count parameter.
    ///
    /// # Panics
    /// If the policy has no such count parameter (a bug in a policy's constructor).
    pub fn count(&self, key: &str) -> u64 {
        match self.value(key) {
            ParamValue::Count(n) => n,
            ParamValue::Choice(_) => panic!("{key} is a choice"),
        }
    }

    fn value(&self, key: &str) -> ParamValue {
        let found = self.values.iter().find(|(k, _)| *k == key);
        found
            .unwrap_or_else(|| panic!("{} has no setting {key}", self.name))
            .1
    }

    /// The chosen value of every choice parameter: `(key, choice)`.
    pub fn chosen(&self) -> Vec<(&'static str, Choice)> {
        let entry = self.entry();
        entry
            .params
            .iter()
            .filter_map(|spec| match (spec.kind, self.value(spec.key)) {
                (ParamKind::Choice(options), ParamValue::Choice(name)) => options()
                    .into_iter()
                    .find(|c| c.name == name)
                    .map(|c| (spec.key, c)),
                _ => None,
            })
            .collect()
    }

    /// Whether the chosen chunk policy reads per-chunk priorities (`priority-chunk`):
    /// only then must priority lists match the buffers' chunks.
    pub fn uses_chunk_priorities(&self) -> bool {
        self.values.iter().any(|(key, value)| {
            *key == CHUNK_PARAM.key
                && CHUNKS.iter().any(|c| {
                    *value == ParamValue::Choice(c.choice.name)
                        && (c.build)().per_chunk_priorities()
                })
        })
    }

    /// What the policy with these settings needs from the device.
    pub fn needs(&self) -> Needs {
        self.chosen()
            .iter()
            .fold(self.entry().choice.needs, |needs, (_, c)| {
                needs.union(c.needs)
            })
    }

    pub(crate) fn build(&self, budget: Budget) -> Box<dyn MemoryPolicy> {
        (self.entry().build)(self, budget)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_policy_builds_with_its_defaults_and_names_a_scheduler() {
        for entry in POLICIES {
            let settings = PolicySettings::new(entry.choice.name, 3).unwrap();
            assert_eq!(settings.values().len(), entry.params.len());
            assert!(
                SCHEDULERS.iter().any(|s| s.choice.name == entry.scheduler),
                "{}",
                entry.choice.name
            );
            let needs = settings.needs();
            assert_eq!(
                needs.launch_gating,
                build_scheduler(&settings).gates(),
                "{}: gating needs and scheduler agree",
                entry.choice.name
            );
        }
    }

    #[test]
    fn settings_check_keys_and_values() {
        let s = PolicySettings::named("gpuswap");
        assert_eq!(s.choice("victim"), "largest-share");
        let s = s.set("chunk_policy", "reverse-swap").unwrap();
        assert!(s.needs().reference_bits);
        assert!(matches!(
            s.clone().set("chunk_policy", "lru"),
            Err(SettingsError::BadValue { .. })
        ));
        assert!(matches!(
            PolicySettings::named("native").set("victim", "performance"),
            Err(SettingsError::UnknownKey { .. })
        ));
        assert!(matches!(
            PolicySettings::new("magic", 1),
            Err(SettingsError::UnknownPolicy { .. })
        ));
        assert_eq!(
            PolicySettings::new("static", 4).unwrap().count("tenants"),
            4
        );
        let err = PolicySettings::named("static")
            .set("tenants", "0")
            .unwrap_err();
        assert!(err.to_string().contains("positive whole number"), "{err}");
    }
}
