//! Per-tenant memory contracts: what a tenant is promised (a guarantee), what it may
//! not exceed (limits), its weight under pressure and its priority class, and which of
//! these terms each mode honours. A leaf: the books keep each tenant's contract beside
//! its figures, and the policies read it through the books.
//!
//! The terms follow what operators of shared GPUs ask for (Kubernetes requests and
//! limits, HAMi's hard memory cap, weighted fair shares). What each means:
//! - `vram_guarantee`: VRAM the tenant keeps. A mode that evicts never chooses a tenant
//!   at or under its guarantee as a victim; a mode that cannot evict reserves the part
//!   not yet filled, so no other tenant's allocation takes it. Admission refuses a
//!   tenant whose guarantee does not fit beside the others'.
//! - `vram_limit`: the most VRAM it may hold; the part of an allocation beyond it is
//!   placed in host memory, and evicted data never returns beyond it.
//! - `memory_limit`: the most it may allocate in all; beyond it `at_limit` decides:
//!   `fail` the allocation, `wait` until the tenant frees enough, or `spill` (serve it,
//!   VRAM capped at the limit, the rest in host memory).
//! - `host_limit`: the most host memory its evicted or host-placed data may take.
//! - `weight`: its share of VRAM under pressure relative to the others.
//! - `priority_class`: tenants of a higher class are evicted only when no tenant of a
//!   lower class can give.

use std::fmt;

use serde::Serialize;
use thiserror::Error;

/// What happens to an allocation that would take a tenant beyond its `memory_limit`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AtLimit {
    /// The allocation fails (a HAMi-style hard cap).
    #[default]
    Fail,
    /// The allocation waits until the tenant's own frees make room.
    Wait,
    /// The allocation is served; the tenant's VRAM is capped at the limit and the rest
    /// goes to host memory.
    Spill,
}

impl AtLimit {
    /// Every value with its name, as scenario files and configurations write it.
    pub const NAMES: [(&'static str, AtLimit); 3] = [
        ("fail", AtLimit::Fail),
        ("wait", AtLimit::Wait),
        ("spill", AtLimit::Spill),
    ];

    /// The value named `name`.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::NAMES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| *v)
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        Self::NAMES
            .iter()
            .find(|(_, v)| *v == self)
            .map(|(n, _)| *n)
            .expect("every value is named")
    }
}

/// A tenant's memory contract. The default promises nothing and limits nothing: every
/// tenant equal, as before contracts existed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Contract {
    /// VRAM the tenant keeps (`vram_guarantee`).
    pub vram_guarantee_bytes: u64,
    /// The most VRAM it may hold (`vram_limit`).
    pub vram_limit_bytes: Option<u64>,
    /// The most it may allocate in all (`memory_limit`).
    pub memory_limit_bytes: Option<u64>,
    /// What happens beyond `memory_limit` (`at_limit`).
    pub at_limit: AtLimit,
    /// The most host memory its evicted or host-placed data may take (`host_limit`).
    pub host_limit_bytes: Option<u64>,
    /// Its share of VRAM under pressure relative to others (`weight`, at least 1).
    pub weight: u32,
    /// Tenants of a higher class are evicted last (`priority_class`).
    pub priority_class: u8,
    /// With `at_limit = "wait"`: how long an allocation may wait for the tenant's own
    /// frees before it fails as out of memory (`wait_timeout`); `None`: for ever. The
    /// driver that knows time enforces it ([`crate::Manager::handle_wait_expired`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait_timeout_ns: Option<u64>,
}

impl Default for Contract {
    fn default() -> Self {
        Self {
            vram_guarantee_bytes: 0,
            vram_limit_bytes: None,
            memory_limit_bytes: None,
            at_limit: AtLimit::Fail,
            host_limit_bytes: None,
            weight: 1,
            priority_class: 0,
            wait_timeout_ns: None,
        }
    }
}

/// The guarantee rule every mode that takes VRAM back obeys: a tenant holding `held`
/// may give up `giving` of it only if it keeps at least its `guarantee` (a tenant
/// without one may give anything). In bytes or in pages, as long as all three agree.
pub(crate) fn keeps_guarantee(held: u64, guarantee: u64, giving: u64) -> bool {
    guarantee == 0 || held >= guarantee.saturating_add(giving)
}

/// One term of a contract, named by its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Term {
    /// `vram_guarantee`.
    VramGuarantee,
    /// `vram_limit`.
    VramLimit,
    /// `memory_limit` (with `at_limit = "fail"`).
    MemoryLimit,
    /// `at_limit = "wait"`.
    Wait,
    /// `at_limit = "spill"`.
    Spill,
    /// `host_limit`.
    HostLimit,
    /// `weight`.
    Weight,
    /// `priority_class`.
    PriorityClass,
}

impl Term {
    /// Every term, in the order listings show them.
    pub const ALL: [Term; 8] = [
        Term::VramGuarantee,
        Term::VramLimit,
        Term::MemoryLimit,
        Term::Wait,
        Term::Spill,
        Term::HostLimit,
        Term::Weight,
        Term::PriorityClass,
    ];

    /// How scenario files and configurations write it.
    pub fn key(self) -> &'static str {
        match self {
            Term::VramGuarantee => "vram_guarantee",
            Term::VramLimit => "vram_limit",
            Term::MemoryLimit => "memory_limit",
            Term::Wait => "at_limit = \"wait\"",
            Term::Spill => "at_limit = \"spill\"",
            Term::HostLimit => "host_limit",
            Term::Weight => "weight",
            Term::PriorityClass => "priority_class",
        }
    }

    const fn bit(self) -> u8 {
        1 << self as u8
    }
}

/// A set of terms: those a mode honours, or those a contract sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Terms(u8);

impl Terms {
    /// No term.
    pub const NONE: Terms = Terms(0);

    /// The set of `terms`.
    pub const fn of(terms: &[Term]) -> Terms {
        let mut bits = 0;
        let mut i = 0;
        while i < terms.len() {
            bits |= terms[i].bit();
            i += 1;
        }
        Terms(bits)
    }

    /// The set with `term` too.
    pub const fn with(self, term: Term) -> Terms {
        Terms(self.0 | term.bit())
    }

    /// The set without `term`.
    pub const fn without(self, term: Term) -> Terms {
        Terms(self.0 & !term.bit())
    }

    /// Both sets together.
    pub const fn union(self, other: Terms) -> Terms {
        Terms(self.0 | other.0)
    }

    /// Whether every term of the set is in `other`.
    pub fn is_within(self, other: Terms) -> bool {
        self.0 & !other.0 == 0
    }

    /// Whether `term` is in the set.
    pub fn contains(self, term: Term) -> bool {
        self.0 & term.bit() != 0
    }

    /// The terms of the set, in [`Term::ALL`]'s order.
    pub fn iter(self) -> impl Iterator<Item = Term> {
        Term::ALL.into_iter().filter(move |t| self.contains(*t))
    }
}

/// A contract that contradicts itself.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ContractError {
    /// `weight = 0`.
    #[error("weight must be at least 1")]
    ZeroWeight,
    /// A guarantee above a limit the tenant can never exceed.
    #[error("vram_guarantee ({guarantee_bytes} bytes) is above {limit} ({limit_bytes} bytes)")]
    GuaranteeOverLimit {
        /// The guarantee.
        guarantee_bytes: u64,
        /// The limit's key.
        limit: &'static str,
        /// The limit.
        limit_bytes: u64,
    },
    /// `at_limit` other than `fail` without a `memory_limit` to apply at.
    #[error("at_limit = \"{0}\" needs a memory_limit")]
    AtLimitWithoutLimit(&'static str),
    /// `wait_timeout` without `at_limit = "wait"`, or of zero.
    #[error("wait_timeout needs at_limit = \"wait\" and a duration above 0")]
    WaitTimeoutWithoutWait,
}

impl Contract {
    /// Whether it promises and limits nothing.
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }

    /// The terms it sets.
    pub fn terms(&self) -> Terms {
        let set = [
            (self.vram_guarantee_bytes > 0, Term::VramGuarantee),
            (self.vram_limit_bytes.is_some(), Term::VramLimit),
            (self.memory_limit_bytes.is_some(), Term::MemoryLimit),
            (self.at_limit == AtLimit::Wait, Term::Wait),
            (self.at_limit == AtLimit::Spill, Term::Spill),
            (self.host_limit_bytes.is_some(), Term::HostLimit),
            (self.weight != 1, Term::Weight),
            (self.priority_class != 0, Term::PriorityClass),
        ];
        Terms(
            set.iter()
                .filter(|(on, _)| *on)
                .fold(0, |bits, (_, t)| bits | t.bit()),
        )
    }

    /// Checks that the terms agree with each other.
    pub fn check(&self) -> Result<(), ContractError> {
        if self.weight == 0 {
            return Err(ContractError::ZeroWeight);
        }
        if self.memory_limit_bytes.is_none() && self.at_limit != AtLimit::Fail {
            return Err(ContractError::AtLimitWithoutLimit(self.at_limit.name()));
        }
        if self
            .wait_timeout_ns
            .is_some_and(|ns| ns == 0 || self.at_limit != AtLimit::Wait)
        {
            return Err(ContractError::WaitTimeoutWithoutWait);
        }
        let limits = [
            ("vram_limit", self.vram_limit_bytes),
            ("memory_limit", self.memory_limit_bytes),
        ];
        for (limit, bytes) in limits {
            if let Some(limit_bytes) = bytes.filter(|b| *b < self.vram_guarantee_bytes) {
                return Err(ContractError::GuaranteeOverLimit {
                    guarantee_bytes: self.vram_guarantee_bytes,
                    limit,
                    limit_bytes,
                });
            }
        }
        Ok(())
    }

    /// The terms of it that a mode honouring `honoured` would ignore.
    pub fn unhonoured(&self, honoured: Terms) -> Terms {
        Terms(self.terms().0 & !honoured.0)
    }

    /// The most VRAM the tenant may hold: its `vram_limit`, and under `spill` its
    /// `memory_limit` too.
    pub(crate) fn vram_cap_bytes(&self) -> u64 {
        let spill_cap = match self.at_limit {
            AtLimit::Spill => self.memory_limit_bytes,
            AtLimit::Fail | AtLimit::Wait => None,
        };
        self.vram_limit_bytes
            .unwrap_or(u64::MAX)
            .min(spill_cap.unwrap_or(u64::MAX))
    }

    /// The most host memory its data may take.
    pub(crate) fn host_cap_bytes(&self) -> u64 {
        self.host_limit_bytes.unwrap_or(u64::MAX)
    }

    /// The most it may allocate before `at_limit` applies (`None` under `spill`, which
    /// serves everything).
    pub(crate) fn allocation_cap_bytes(&self) -> Option<u64> {
        match self.at_limit {
            AtLimit::Spill => None,
            AtLimit::Fail | AtLimit::Wait => self.memory_limit_bytes,
        }
    }

    /// The terms it sets, in words, with byte figures written by `bytes` (the
    /// callers' own unit formatting); empty for the default contract.
    pub fn describe(&self, bytes: impl Fn(u64) -> String) -> String {
        let mut parts = Vec::new();
        if self.vram_guarantee_bytes > 0 {
            parts.push(format!("guarantee {}", bytes(self.vram_guarantee_bytes)));
        }
        if let Some(b) = self.vram_limit_bytes {
            parts.push(format!("vram limit {}", bytes(b)));
        }
        if let Some(b) = self.memory_limit_bytes {
            let wait = self.wait_timeout_ns.map_or(String::new(), |ns| {
                format!(" up to {:.1} s", ns as f64 / 1e9)
            });
            parts.push(format!(
                "memory limit {} ({}{wait})",
                bytes(b),
                self.at_limit.name()
            ));
        }
        if let Some(b) = self.host_limit_bytes {
            parts.push(format!("host limit {}", bytes(b)));
        }
        if self.weight != 1 {
            parts.push(format!("weight {}", self.weight));
        }
        if self.priority_class != 0 {
            parts.push(format!("class {}", self.priority_class));
        }
        parts.join(", ")
    }
}

impl fmt::Display for Terms {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let keys: Vec<&str> = self.iter().map(Term::key).collect();
        if keys.is_empty() {
            f.write_str("none")
        } else {
            f.write_str(&keys.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_sets_no_term_and_caps_nothing() {
        let c = Contract::default();
        assert!(c.is_default());
        assert_eq!(c.terms(), Terms::NONE);
        assert_eq!(c.vram_cap_bytes(), u64::MAX);
        assert_eq!(c.host_cap_bytes(), u64::MAX);
        assert_eq!(c.allocation_cap_bytes(), None);
        assert_eq!(c.describe(|b| b.to_string()), "");
        assert_eq!(c.check(), Ok(()));
    }

    #[test]
    fn spill_caps_vram_at_the_memory_limit_and_serves_everything() {
        let c = Contract {
            memory_limit_bytes: Some(100),
            at_limit: AtLimit::Spill,
            vram_limit_bytes: Some(150),
            ..Contract::default()
        };
        assert_eq!(c.vram_cap_bytes(), 100);
        assert_eq!(c.allocation_cap_bytes(), None);
        let fail = Contract {
            at_limit: AtLimit::Fail,
            ..c
        };
        assert_eq!(fail.vram_cap_bytes(), 150);
        assert_eq!(fail.allocation_cap_bytes(), Some(100));
        assert!(c.terms().contains(Term::Spill));
        assert!(!fail.terms().contains(Term::Spill));
    }

    #[test]
    fn contradictions_are_refused() {
        let over = Contract {
            vram_guarantee_bytes: 10,
            vram_limit_bytes: Some(5),
            ..Contract::default()
        };
        assert!(matches!(
            over.check(),
            Err(ContractError::GuaranteeOverLimit {
                limit: "vram_limit",
                ..
            })
        ));
        let weightless = Contract {
            weight: 0,
            ..Contract::default()
        };
        assert_eq!(weightless.check(), Err(ContractError::ZeroWeight));
        let wait = Contract {
            at_limit: AtLimit::Wait,
            ..Contract::default()
        };
        assert_eq!(
            wait.check(),
            Err(ContractError::AtLimitWithoutLimit("wait"))
        );
    }

    #[test]
    fn unhonoured_terms_are_those_set_and_not_honoured() {
        let c = Contract {
            weight: 2,
            priority_class: 1,
            vram_guarantee_bytes: 1,
            ..Contract::default()
        };
        let honoured = Terms::of(&[Term::VramGuarantee, Term::Weight]);
        assert_eq!(c.unhonoured(honoured), Terms::of(&[Term::PriorityClass]));
        assert_eq!(c.unhonoured(honoured).to_string(), "priority_class");
        assert_eq!(AtLimit::from_name("spill"), Some(AtLimit::Spill));
        assert_eq!(AtLimit::Wait.name(), "wait");
    }
}
