//! Memory-contract keys: a scenario's `[[tenant]]` tables and the daemon's
//! `--contracts` file (`[process.NAME]` tables) write a tenant's contract with the same
//! keys, read here into the core's [`Contract`], every mistake naming the key.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;

use gpuswap_core::contract::{ContractError, Term};
use gpuswap_core::registry::{Condition, POLICIES, PolicyEntry};
use gpuswap_core::{AtLimit, Contract, PolicySettings};
use gpuswap_daemon::identity::ProcessContract;
use gpuswap_sim::units::{format_bytes, parse_bytes, parse_ns};
use serde::Deserialize;
use toml::Spanned;
use toml::de::{DeTable, DeValue};

/// Every contract key: (key, value, default, help), for `gpuswap keys` and
/// `gpuswap init`.
pub const KEYS: [(&str, &str, &str, &str); 8] = [
    (
        "vram_guarantee",
        "size: B, KiB, MiB, GiB",
        "0B",
        "VRAM the tenant keeps: never a victim at or under it; admission refuses a guarantee that does not fit beside the others'",
    ),
    (
        "vram_limit",
        "size: B, KiB, MiB, GiB",
        "unset",
        "the most VRAM the tenant may hold; the rest of its data goes to host memory",
    ),
    (
        "memory_limit",
        "size: B, KiB, MiB, GiB",
        "unset",
        "the most the tenant may allocate in all; beyond it at_limit decides",
    ),
    (
        "at_limit",
        "fail | wait | spill",
        "fail",
        "at the memory_limit: fail the allocation, wait for the tenant's own frees (daemon only), or spill (VRAM capped at the limit, the rest in host memory)",
    ),
    (
        "wait_timeout",
        "duration: ns, us, ms, s",
        "unset",
        "with at_limit = \"wait\": how long an allocation waits for the tenant's own frees before it fails as out of memory (daemon only; unset: for ever, which suits only a program whose other threads free)",
    ),
    (
        "host_limit",
        "size: B, KiB, MiB, GiB",
        "unset",
        "the most host memory the tenant's evicted or host-placed data may take",
    ),
    (
        "weight",
        "whole number, 1 to 1000",
        "1",
        "the tenant's share of VRAM under pressure relative to others",
    ),
    (
        "priority_class",
        "whole number, 0 to 255",
        "0",
        "tenants of a higher class are evicted last",
    ),
];

/// The modes that honour `term`, each with the parameter value it needs, if any.
fn modes_honouring(term: Term) -> String {
    let modes: Vec<String> = POLICIES
        .iter()
        .filter(|p| p.honours.contains(term))
        .map(|p| match condition(p, term) {
            Some(c) => format!("{} (with {} = {})", p.choice.name, c.key, c.value),
            None => p.choice.name.to_owned(),
        })
        .collect();
    modes.join(", ")
}

/// The parameter value `entry` needs to honour `term`, if it needs one.
fn condition(entry: &PolicyEntry, term: Term) -> Option<&'static Condition> {
    entry
        .honours_only_with
        .iter()
        .find(|c| c.terms.contains(term))
}

/// Which modes honour contract key `key`, in words (`at_limit` per value; `wait_timeout`
/// where `wait` is).
pub fn modes_text(key: &str) -> String {
    if key == "at_limit" {
        return format!(
            "fail: modes {}; spill: modes {}; wait: modes {}, under gpuswap daemon only (a simulated program cannot free while it waits)",
            modes_honouring(Term::MemoryLimit),
            modes_honouring(Term::Spill),
            modes_honouring(Term::Wait)
        );
    }
    if key == "wait_timeout" {
        return format!(
            "with at_limit = \"wait\": modes {}, under gpuswap daemon only",
            modes_honouring(Term::Wait)
        );
    }
    let term = Term::ALL
        .into_iter()
        .find(|t| t.key() == key)
        .expect("every contract key but at_limit and wait_timeout names a term");
    format!("modes {}", modes_honouring(term))
}

/// A tenant's contract keys as a TOML table holds them (a scenario's tenant table
/// holds the same keys among its others and moves them here).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContractTable {
    pub(crate) vram_guarantee: Option<Spanned<String>>,
    pub(crate) vram_limit: Option<Spanned<String>>,
    pub(crate) memory_limit: Option<Spanned<String>>,
    pub(crate) at_limit: Option<Spanned<String>>,
    pub(crate) wait_timeout: Option<Spanned<String>>,
    pub(crate) host_limit: Option<Spanned<String>>,
    pub(crate) weight: Option<Spanned<i64>>,
    pub(crate) priority_class: Option<Spanned<i64>>,
}

/// How a caller builds its error from a key's name, the key's span and a message.
pub type KeyError<'a, E> = &'a dyn Fn(String, Option<Range<usize>>, String) -> E;

impl ContractTable {
    /// The contract these keys write; `key` turns a key's name into the name errors
    /// give it (`tenant[1].weight`).
    pub fn contract<E>(
        &self,
        key: &dyn Fn(&str) -> String,
        error: KeyError<'_, E>,
    ) -> Result<Contract, E> {
        let bytes = |name: &str, value: &Option<Spanned<String>>| -> Result<Option<u64>, E> {
            value
                .as_ref()
                .map(|v| {
                    parse_bytes(v.get_ref())
                        .map_err(|e| error(key(name), Some(v.span()), e.to_string()))
                })
                .transpose()
        };
        let whole = |name: &str, value: &Option<Spanned<i64>>, range: Range<i64>| {
            value
                .as_ref()
                .map(|v| {
                    let n = *v.get_ref();
                    if range.contains(&n) {
                        Ok(n)
                    } else {
                        Err(error(
                            key(name),
                            Some(v.span()),
                            format!(
                                "expected a whole number from {} to {}, got {n}",
                                range.start,
                                range.end - 1
                            ),
                        ))
                    }
                })
                .transpose()
        };
        let at_limit = match &self.at_limit {
            None => AtLimit::Fail,
            Some(v) => AtLimit::from_name(v.get_ref()).ok_or_else(|| {
                let names: Vec<&str> = AtLimit::NAMES.iter().map(|(n, _)| *n).collect();
                error(
                    key("at_limit"),
                    Some(v.span()),
                    format!(
                        "unknown value {:?}; expected one of: {}",
                        v.get_ref(),
                        names.join(", ")
                    ),
                )
            })?,
        };
        let wait_timeout_ns = self
            .wait_timeout
            .as_ref()
            .map(|v| {
                parse_ns(v.get_ref())
                    .map_err(|e| error(key("wait_timeout"), Some(v.span()), e.to_string()))
            })
            .transpose()?;
        let contract = Contract {
            vram_guarantee_bytes: bytes("vram_guarantee", &self.vram_guarantee)?.unwrap_or(0),
            vram_limit_bytes: bytes("vram_limit", &self.vram_limit)?,
            memory_limit_bytes: bytes("memory_limit", &self.memory_limit)?,
            at_limit,
            host_limit_bytes: bytes("host_limit", &self.host_limit)?,
            weight: whole("weight", &self.weight, 1..1001)?.map_or(1, |w| w as u32),
            priority_class: whole("priority_class", &self.priority_class, 0..256)?
                .map_or(0, |c| c as u8),
            wait_timeout_ns,
        };
        contract.check().map_err(|e| {
            let (name, span) = match e {
                ContractError::ZeroWeight => ("weight", self.weight.as_ref().map(Spanned::span)),
                ContractError::GuaranteeOverLimit { .. } => (
                    "vram_guarantee",
                    self.vram_guarantee.as_ref().map(Spanned::span),
                ),
                ContractError::AtLimitWithoutLimit(_) => {
                    ("at_limit", self.at_limit.as_ref().map(Spanned::span))
                }
                ContractError::WaitTimeoutWithoutWait => (
                    "wait_timeout",
                    self.wait_timeout.as_ref().map(Spanned::span),
                ),
            };
            error(key(name), span, e.to_string())
        })?;
        Ok(contract)
    }

    /// The span of the key that sets `term`, for errors about it.
    pub fn span_of(&self, term: Term) -> Option<Range<usize>> {
        let string = |v: &Option<Spanned<String>>| v.as_ref().map(Spanned::span);
        let number = |v: &Option<Spanned<i64>>| v.as_ref().map(Spanned::span);
        match term {
            Term::VramGuarantee => string(&self.vram_guarantee),
            Term::VramLimit => string(&self.vram_limit),
            Term::MemoryLimit => string(&self.memory_limit),
            Term::Wait | Term::Spill => string(&self.at_limit),
            Term::HostLimit => string(&self.host_limit),
            Term::Weight => number(&self.weight),
            Term::PriorityClass => number(&self.priority_class),
        }
    }
}

/// The name of the key that sets `term`.
pub fn key_of(term: Term) -> &'static str {
    match term {
        Term::Wait | Term::Spill => "at_limit",
        other => other.key(),
    }
}

/// Checks that the mode of `settings` honours every term `contract` sets; the error
/// names the first one it ignores, what the mode honours and which modes honour it.
pub fn check_mode<E>(
    contract: &Contract,
    settings: &PolicySettings,
    table: &ContractTable,
    key: &dyn Fn(&str) -> String,
    error: KeyError<'_, E>,
) -> Result<(), E> {
    let honoured = settings.honours();
    let Some(term) = contract.unhonoured(honoured).iter().next() else {
        return Ok(());
    };
    let entry = settings.entry();
    let message = match condition(entry, term) {
        Some(c) => format!(
            "mode {} honours {} only with {} = \"{}\" (it has {} = \"{}\")",
            entry.choice.name,
            term.key(),
            c.key,
            c.value,
            c.key,
            settings.choice(c.key)
        ),
        None => format!(
            "mode {} does not honour {} (it honours: {honoured}); modes that do: {}",
            entry.choice.name,
            term.key(),
            modes_honouring(term)
        ),
    };
    Err(error(key(key_of(term)), table.span_of(term), message))
}

/// A contract in a few words, for reports and `gpuswap top` ("" for none).
pub fn describe(contract: &Contract) -> String {
    contract.describe(format_bytes)
}

/// The daemon's `--contracts` file: a `[process.NAME]` table of contract keys per
/// process name (its `uids` and `cgroup` taken out first: [`take_binding`]).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ContractsFile {
    #[serde(default)]
    process: BTreeMap<String, ContractTable>,
}

/// Who may take a `[process.NAME]` table: its `uids` and `cgroup`.
#[derive(Default)]
struct Binding {
    uids: Vec<u32>,
    cgroup: Option<String>,
}

/// Takes a `[process.NAME]` table's `uids` and `cgroup` out of it, checked, so that
/// the rest is read as any table of contract keys.
fn take_binding(
    table: &mut DeTable<'_>,
    key: &dyn Fn(&str) -> String,
    error: KeyError<'_, String>,
) -> Result<Binding, String> {
    let mut binding = Binding::default();
    if let Some(value) = table.remove("uids") {
        let span = value.span();
        let bad = |got: String| {
            error(
                key("uids"),
                Some(span.clone()),
                format!(
                    "expected a list of one or more uids (whole numbers from 0 to {}), got {got}",
                    u32::MAX - 1
                ),
            )
        };
        let numbers = Vec::<i64>::deserialize(toml::de::ValueDeserializer::from(value))
            .map_err(|e| bad(e.message().to_owned()))?;
        if numbers.is_empty() {
            return Err(bad("[]".into()));
        }
        for n in numbers {
            // u32::MAX is (uid_t)-1, no user's.
            let uid = u32::try_from(n)
                .ok()
                .filter(|u| *u != u32::MAX)
                .ok_or_else(|| bad(n.to_string()))?;
            binding.uids.push(uid);
        }
    }
    if let Some(value) = table.remove("cgroup") {
        let span = value.span();
        let path = String::deserialize(toml::de::ValueDeserializer::from(value))
            .ok()
            .filter(|p| p.starts_with('/'));
        binding.cgroup = Some(path.ok_or_else(|| {
            error(
                key("cgroup"),
                Some(span),
                "expected an absolute cgroup path (as /proc/PID/cgroup shows it), such as \
                 \"/system.slice/slurmstepd.scope/job_42\""
                    .into(),
            )
        })?);
    }
    Ok(binding)
}

/// Reads a contracts file (`--contracts`, or one of `--contracts-dir`), checking each
/// contract, who may take it, that the mode of `settings` honours it and that no
/// guarantee exceeds `vram_bytes` (when known); errors name the file, the key and its
/// line.
pub fn load_contracts(
    path: &Path,
    settings: &PolicySettings,
    vram_bytes: Option<u64>,
) -> Result<Vec<ProcessContract>, String> {
    let text = crate::text::read_text(path).map_err(|m| format!("{}: {m}", path.display()))?;
    let toml_error = |mut e: toml::de::Error| {
        e.set_input(Some(&text));
        format!("{}: {}", path.display(), crate::text::toml_error(&e))
    };
    let error = |key: String, span: Option<Range<usize>>, message: String| {
        let line = span
            .map(|s| format!(" (line {})", text[..s.start].lines().count().max(1)))
            .unwrap_or_default();
        format!("{}: {key}{line}: {message}", path.display())
    };
    let mut root = DeTable::parse(&text).map_err(toml_error)?;
    let mut bindings = BTreeMap::new();
    if let Some(process) = root.get_mut().get_mut("process")
        && let DeValue::Table(tables) = process.get_mut()
    {
        for (name, table) in tables.iter_mut() {
            if let DeValue::Table(table) = table.get_mut() {
                let key = |k: &str| format!("process.{}.{k}", name.get_ref());
                let binding = take_binding(table, &key, &error)?;
                bindings.insert(name.get_ref().to_string(), binding);
            }
        }
    }
    let file =
        ContractsFile::deserialize(toml::de::Deserializer::from(root)).map_err(toml_error)?;
    let mut contracts = Vec::new();
    for (name, table) in &file.process {
        let key = |k: &str| format!("process.{name}.{k}");
        let contract = table.contract(&key, &error)?;
        check_mode(&contract, settings, table, &key, &error)?;
        if let Some(vram) = vram_bytes.filter(|v| contract.vram_guarantee_bytes > *v) {
            return Err(error(
                key("vram_guarantee"),
                table.span_of(Term::VramGuarantee),
                format!(
                    "{} is more than the --vram of {}",
                    format_bytes(contract.vram_guarantee_bytes),
                    format_bytes(vram)
                ),
            ));
        }
        let binding = bindings.remove(name).unwrap_or_default();
        contracts.push(ProcessContract {
            name: name.clone(),
            contract,
            uids: binding.uids,
            cgroup: binding.cgroup,
            source: path.to_owned(),
        });
    }
    Ok(contracts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(name: &str, text: &str, mode: &str) -> Result<BTreeMap<String, Contract>, String> {
        load_tables(name, text, mode)
            .map(|tables| tables.into_iter().map(|t| (t.name, t.contract)).collect())
    }

    fn load_tables(name: &str, text: &str, mode: &str) -> Result<Vec<ProcessContract>, String> {
        let path = std::env::temp_dir().join(format!(
            "gpuswap-contracts-{}-{name}.toml",
            std::process::id()
        ));
        std::fs::write(&path, text).unwrap();
        let result = load_contracts(&path, &PolicySettings::named(mode), Some(16 << 30));
        std::fs::remove_file(&path).unwrap();
        result
    }

    #[test]
    fn the_daemons_file_gives_contracts_by_process_name() {
        let text = "[process.server]\nvram_guarantee = \"8GiB\"\npriority_class = 1\n\n[process.\"batch job\"]\nweight = 2\n";
        let contracts = load("good", text, "gpuswap").unwrap();
        assert_eq!(contracts["server"].vram_guarantee_bytes, 8 << 30);
        assert_eq!(contracts["server"].priority_class, 1);
        assert_eq!(contracts["batch job"].weight, 2);
        assert_eq!(describe(&contracts["server"]), "guarantee 8.0 GiB, class 1");
    }

    #[test]
    fn mistakes_in_the_daemons_file_name_file_key_and_line() {
        let e = load("unhonoured", "[process.a]\nweight = 2\n", "fcfs").unwrap_err();
        assert!(
            e.contains("gpuswap-contracts-")
                && e.contains("process.a.weight (line 2): mode fcfs does not honour weight"),
            "{e}"
        );
        let e = load(
            "value",
            "[process.a]\n\nhost_limit = \"a lot\"\n",
            "gpuswap",
        )
        .unwrap_err();
        assert!(e.contains("process.a.host_limit (line 3)"), "{e}");
        let e = load("unknown", "[process.a]\nweigth = 2\n", "gpuswap").unwrap_err();
        assert!(e.contains("weigth") && e.contains("weight"), "{e}");
        let e = load(
            "large",
            "[process.a]\nvram_guarantee = \"20GiB\"\n",
            "gpuswap",
        )
        .unwrap_err();
        assert!(
            e.contains(
                "process.a.vram_guarantee (line 2): 20.0 GiB is more than the --vram of 16.0 GiB"
            ),
            "{e}"
        );
        let e = load("unknown", "[process.a]\nweigth = 2\n", "gpuswap").unwrap_err();
        assert!(e.contains("weigth") && e.contains("weight"), "{e}");
    }

    #[test]
    fn uids_and_cgroup_say_who_may_take_a_table() {
        let text = "[process.job]\nuids = [1001, 1002]\ncgroup = \"/slurm/uid_1001/job_7\"\nvram_guarantee = \"1GiB\"\n\n[process.mine]\nweight = 2\n";
        let tables = load_tables("bound", text, "gpuswap").unwrap();
        assert_eq!(tables[0].name, "job");
        assert_eq!(tables[0].uids, [1001, 1002]);
        assert_eq!(tables[0].cgroup.as_deref(), Some("/slurm/uid_1001/job_7"));
        assert_eq!(tables[0].contract.vram_guarantee_bytes, 1 << 30);
        assert!(tables[1].uids.is_empty() && tables[1].cgroup.is_none());
        for (bad, what) in [
            ("uids = []", "got []"),
            ("uids = [-1]", "got -1"),
            ("uids = [4294967295]", "got 4294967295"),
            ("uids = \"root\"", "expected a list of one or more uids"),
            ("cgroup = \"job_7\"", "expected an absolute cgroup path"),
            ("cgroup = 7", "expected an absolute cgroup path"),
        ] {
            let e = load_tables("bad", &format!("[process.a]\n\n{bad}\n"), "gpuswap").unwrap_err();
            let field = bad.split(' ').next().unwrap();
            assert!(
                e.contains(&format!("process.a.{field} (line 3): ")) && e.contains(what),
                "{bad}: {e}"
            );
        }
        // The contract keys' mistakes keep their lines with a binding before them.
        let e =
            load_tables("after", "[process.a]\nuids = [1]\nweigth = 2\n", "gpuswap").unwrap_err();
        assert!(e.contains("weigth") && e.contains("line 3"), "{e}");
    }
}
