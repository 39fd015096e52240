//! The `[[tenant]]` tables: each tenant's contract, what it runs (an app, a replayed
//! trace or a replayed fault log), its name and its buffers' priorities.

use std::collections::BTreeMap;
use std::path::Path;

use gpuswap_core::contract::{Contract, Term};
use gpuswap_core::uvm::pages::{PAGE_BYTES, PAGES_PER_BLOCK};
use gpuswap_core::{AtLimit, PolicySettings};
use gpuswap_sim::apps;
use gpuswap_sim::engine::{IdleBetween, TenantSpec};
use gpuswap_sim::preset::Preset;
use gpuswap_sim::program::Program;
use gpuswap_sim::trace::torch::{Snapshot, SnapshotError};
use gpuswap_sim::trace::uvm_log::FaultLog;
use gpuswap_sim::units::{format_bytes, parse_ns};
use serde::Deserialize;
use toml::Spanned;

use super::device::Device;
use super::manager::Manager;
use super::values::{ScenarioError, ValueError, find_named, paged_only, parsed};
use crate::contract_keys::{ContractTable, check_mode};
use crate::priorities::PrioritiesFile;

/// Longest tenant name: names head table and CSV columns.
const MAX_NAME_CHARS: usize = 64;

/// The share of the device's VRAM bandwidth a replayed trace's kernels use while it
/// runs alone: a snapshot does not record its kernels' traffic. Ours, unconfirmed; set
/// `trace_bandwidth` to what a profiler (Nsight Compute's DRAM throughput) measured.
const DEFAULT_TRACE_BANDWIDTH_SHARE: f64 = 0.5;

/// A `[[tenant]]` table as the file writes it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TenantTable {
    name: Option<Spanned<String>>,
    app: Option<Spanned<String>>,
    /// A PyTorch memory snapshot to replay instead of an app.
    trace: Option<Spanned<String>>,
    /// The share of the device's VRAM bandwidth a trace's kernels use.
    trace_bandwidth: Option<Spanned<f64>>,
    /// A unified-memory fault log (uvm-eval's format) to replay instead of an app.
    fault_log: Option<Spanned<String>>,
    size: Option<Spanned<String>>,
    repeat: Option<Spanned<i64>>,
    /// Idle time between repeats: a duration, or `exp(DURATION)`.
    idle_between: Option<Spanned<String>>,
    start: Option<Spanned<String>>,
    priorities_file: Option<Spanned<String>>,
    #[serde(default)]
    priorities: BTreeMap<String, Spanned<i32>>,
    #[serde(default)]
    chunk_priorities: BTreeMap<String, Spanned<Vec<i32>>>,
    // The memory contract ([`crate::contract_keys`]).
    vram_guarantee: Option<Spanned<String>>,
    vram_limit: Option<Spanned<String>>,
    memory_limit: Option<Spanned<String>>,
    at_limit: Option<Spanned<String>>,
    wait_timeout: Option<Spanned<String>>,
    host_limit: Option<Spanned<String>>,
    weight: Option<Spanned<i64>>,
    priority_class: Option<Spanned<i64>>,
}

impl TenantTable {
    /// Its contract keys.
    fn contract_table(&self) -> ContractTable {
        ContractTable {
            vram_guarantee: self.vram_guarantee.clone(),
            vram_limit: self.vram_limit.clone(),
            memory_limit: self.memory_limit.clone(),
            at_limit: self.at_limit.clone(),
            wait_timeout: self.wait_timeout.clone(),
            host_limit: self.host_limit.clone(),
            weight: self.weight.clone(),
            priority_class: self.priority_class.clone(),
        }
    }
}

/// What every tenant is read against: the device, the memory manager, and the folder
/// the files it names are relative to (the scenario's).
pub(super) struct Setting<'a> {
    /// The simulated GPU: its shape sizes the apps' programs, its bandwidth a trace's.
    pub preset: &'a Preset,
    /// The memory manager: its mode decides what may be replayed, its chunk size how
    /// long chunk priority lists may be.
    pub manager: &'a Manager,
    /// The scenario's folder.
    pub dir: &'a Path,
    /// How errors are made.
    pub value_error: ValueError<'a>,
}

/// A tenant's key `field` as errors name it (`tenant[1].app`).
fn key_of(i: usize) -> impl Fn(&str) -> String {
    move |field| format!("tenant[{i}].{field}")
}

/// Each tenant's contract, with the keys that wrote it (for errors about them).
pub(super) fn contracts(
    tables: &[TenantTable],
    value_error: ValueError,
) -> Result<Vec<(Contract, ContractTable)>, ScenarioError> {
    let mut contracts = Vec::with_capacity(tables.len());
    for (i, t) in tables.iter().enumerate() {
        let table = t.contract_table();
        contracts.push((table.contract(&key_of(i), value_error)?, table));
    }
    Ok(contracts)
}

/// Refuses contracts that `policy` does not honour or that `device` cannot keep.
pub(super) fn check_contracts(
    contracts: &[(Contract, ContractTable)],
    policy: &PolicySettings,
    device: &Device,
    value_error: ValueError,
) -> Result<(), ScenarioError> {
    let preset = &device.preset;
    for (i, (contract, table)) in contracts.iter().enumerate() {
        let key = key_of(i);
        check_mode(contract, policy, table, &key, value_error)?;
        if contract.at_limit == AtLimit::Wait {
            return Err(value_error(
                key("at_limit"),
                table.span_of(Term::Wait),
                "\"wait\" needs a tenant that can free memory while one of its allocations waits (a multi-threaded process under gpuswap daemon); a simulated program blocks on its allocation, so it would wait forever: expected \"fail\" or \"spill\"".into(),
            ));
        }
        // Under unified memory the runtime's buffers stay in VRAM: a limit must leave
        // a VA block of room for pages beyond them, or no page could ever come in.
        let block_bytes = (PAGES_PER_BLOCK as u64) * PAGE_BYTES;
        if let Some(limit) = contract
            .vram_limit_bytes
            .filter(|l| policy.needs().page_faults && *l < preset.runtime_bytes() + block_bytes)
        {
            return Err(value_error(
                key("vram_limit"),
                table.span_of(Term::VramLimit),
                format!(
                    "expected at least {} under mode uvm: the {} of the runtime's buffers on {}, which stay in VRAM, and a 2 MiB block for pages; got {}",
                    format_bytes(preset.runtime_bytes() + block_bytes),
                    format_bytes(preset.runtime_bytes()),
                    preset.name,
                    format_bytes(limit)
                ),
            ));
        }
        if contract.vram_guarantee_bytes > device.tenant_vram_bytes {
            return Err(value_error(
                key("vram_guarantee"),
                table.span_of(Term::VramGuarantee),
                format!(
                    "expected at most the {} of VRAM tenants get",
                    format_bytes(device.tenant_vram_bytes)
                ),
            ));
        }
    }
    Ok(())
}

/// The tenants, each with its contract from `contracts`.
pub(super) fn parse(
    tables: &[TenantTable],
    contracts: &[(Contract, ContractTable)],
    setting: &Setting,
) -> Result<Vec<TenantSpec>, ScenarioError> {
    let value_error = setting.value_error;
    if tables.is_empty() {
        return Err(value_error(
            "tenant".into(),
            None,
            "expected at least one [[tenant]] table".into(),
        ));
    }
    let mut tenants: Vec<TenantSpec> = Vec::with_capacity(tables.len());
    for (i, t) in tables.iter().enumerate() {
        let tenant = tenant(i, t, contracts[i].0, &tenants, setting)?;
        tenants.push(tenant);
    }
    if tenants.iter().all(|t| t.endless) {
        let i = tenants.len() - 1;
        return Err(value_error(
            format!("tenant[{i}].app"),
            tables[i].app.as_ref().map(Spanned::span),
            format!(
                "{} runs until the other tenants end; expected at least one tenant that is not endless",
                tenants[i].app
            ),
        ));
    }
    Ok(tenants)
}

/// Tenant `i`, read from `t`; `others` are the tenants before it.
fn tenant(
    i: usize,
    t: &TenantTable,
    contract: Contract,
    others: &[TenantSpec],
    setting: &Setting,
) -> Result<TenantSpec, ScenarioError> {
    let key = key_of(i);
    let workload = workload(t, &key, setting)?;
    let start_ns = match &t.start {
        None => 0,
        Some(s) => parsed(s, key("start"), parse_ns, setting.value_error)?,
    };
    let idle_between = idle_between(t, i, &key("idle_between"), setting.value_error)?;
    let name = name(t, i, &workload.app_name, others, setting.value_error)?;
    let (priorities, chunk_priorities) = priorities(t, &workload, &key, setting)?;
    let Workload {
        app_name,
        program,
        model,
        logged_faults_per_batch,
        timing,
    } = workload;
    Ok(TenantSpec {
        start_ns,
        priorities,
        chunk_priorities,
        endless: model.is_some_and(|a| a.endless()),
        sm_share: model.map_or(1.0, |a| a.sm_utilization()),
        logged_faults_per_batch,
        timing,
        contract,
        idle_between,
        ..TenantSpec::new(name, app_name, program)
    })
}

/// What a tenant runs: an app model's program, or one replayed from a file.
struct Workload {
    /// The app's name, or the replayed file's stem.
    app_name: String,
    program: Program,
    /// The app model, when the tenant runs one.
    model: Option<&'static dyn apps::AppModel>,
    /// A replayed fault log's batch sizes.
    logged_faults_per_batch: Option<Vec<u64>>,
    /// How a replayed program is timed (recorded, or invented and why), for the report.
    timing: Option<String>,
}

/// What tenant `t` runs: `app`, `trace` or `fault_log`, exactly one of them.
fn workload(
    t: &TenantTable,
    key: &dyn Fn(&str) -> String,
    setting: &Setting,
) -> Result<Workload, ScenarioError> {
    let value_error = setting.value_error;
    let replayed = |app_name, program, logged_faults_per_batch, timing: String| Workload {
        app_name,
        program,
        model: None,
        logged_faults_per_batch,
        timing: Some(timing),
    };
    // A trace or a fault log runs no app model: it never runs endless, and its SM
    // demand is unknown, so it takes the whole device as an app without a figure does.
    match (&t.app, &t.trace, &t.fault_log) {
        (_, None, _) if t.trace_bandwidth.is_some() => Err(value_error(
            key("trace_bandwidth"),
            t.trace_bandwidth.as_ref().map(Spanned::span),
            "trace_bandwidth applies to a tenant with trace = FILE".into(),
        )),
        (Some(app), None, None) => {
            let app = find_app(app, &key("app"), value_error)?;
            let repeat = repeat(t, &key("repeat"), value_error)?;
            let size = t.size.as_ref().map_or("default", |s| s.get_ref());
            let size_span = t.size.as_ref().map(Spanned::span);
            let program = app
                .program(size, repeat, setting.preset.shape())
                .map_err(|e| value_error(key("size"), size_span, e.message))?;
            Ok(Workload {
                app_name: app.name().to_owned(),
                program,
                model: Some(app),
                logged_faults_per_batch: None,
                timing: None,
            })
        }
        (None, Some(trace), None) => {
            let (name, (program, timing)) = trace_program(t, trace, key, setting)?;
            Ok(replayed(name, program, None, timing))
        }
        (None, None, Some(log)) => {
            let (name, log) = fault_log(t, log, key, setting)?;
            let logged = Some(log.faults_per_batch());
            Ok(replayed(name, log.program(), logged, FaultLog::TIMING.to_owned()))
        }
        (Some(_), Some(trace), None) => Err(value_error(
            key("trace"),
            Some(trace.span()),
            "a tenant runs an app or replays a trace; expected app or trace, not both".into(),
        )),
        (_, _, Some(log)) => Err(value_error(
            key("fault_log"),
            Some(log.span()),
            "a tenant runs an app, replays a trace or replays a fault log; expected one of app, trace and fault_log, not several".into(),
        )),
        (None, None, None) => Err(value_error(
            key("app"),
            None,
            "expected app = NAME (gpuswap apps), trace = \"FILE.pickle\" (a PyTorch memory snapshot) or fault_log = \"FILE\" (a unified-memory fault log)".into(),
        )),
    }
}

/// The app a tenant names.
fn find_app(
    name: &Spanned<String>,
    key: &str,
    value_error: ValueError,
) -> Result<&'static dyn apps::AppModel, ScenarioError> {
    find_named(
        name,
        key,
        apps::find,
        |name| format!("unknown app {name:?}"),
        || apps::all().iter().map(|a| a.name()).collect(),
        value_error,
    )
}

/// How often a tenant's app repeats its main computation.
fn repeat(t: &TenantTable, key: &str, value_error: ValueError) -> Result<u32, ScenarioError> {
    let Some(r) = &t.repeat else { return Ok(1) };
    u32::try_from(*r.get_ref())
        .ok()
        .filter(|r| *r >= 1)
        .ok_or_else(|| {
            value_error(
                key.into(),
                Some(r.span()),
                format!(
                    "expected a whole number from 1 to {}, got {}",
                    u32::MAX,
                    r.get_ref()
                ),
            )
        })
}

/// How long tenant `i` idles between repeats: a duration, or `exp(DURATION)` for
/// exponential times of that mean, drawn on the tenant's stream of the scenario's seed
/// (which `Scenario::set_seed` gives them).
fn idle_between(
    t: &TenantTable,
    i: usize,
    key: &str,
    value_error: ValueError,
) -> Result<IdleBetween, ScenarioError> {
    let Some(value) = &t.idle_between else {
        return Ok(IdleBetween::None);
    };
    let text = value.get_ref().trim();
    let idle = match text.strip_prefix("exp(").and_then(|r| r.strip_suffix(')')) {
        Some(mean) => parse_ns(mean.trim()).map(|mean_ns| IdleBetween::Exponential {
            mean_ns,
            seed: 0,
            stream: i as u64,
        }),
        None => parse_ns(text).map(|ns| IdleBetween::Fixed { ns }),
    };
    idle.map_err(|_| {
        value_error(
            key.into(),
            Some(value.span()),
            format!(
                "expected a duration with a unit (\"20s\"; ns, us, ms or s), or \"exp(DURATION)\" for exponentially distributed idle times of that mean (\"exp(20s)\"); got {:?}",
                value.get_ref()
            ),
        )
    })
}

/// A tenant replaying the PyTorch memory snapshot `trace`: its workload name (the
/// file's stem), program and timing (`Snapshot::timing`).
fn trace_program(
    t: &TenantTable,
    trace: &Spanned<String>,
    key: &dyn Fn(&str) -> String,
    setting: &Setting,
) -> Result<(String, (Program, String)), ScenarioError> {
    let value_error = setting.value_error;
    refuse_app_keys(t, "a trace", key, value_error)?;
    let share = match &t.trace_bandwidth {
        None => DEFAULT_TRACE_BANDWIDTH_SHARE,
        Some(v) if (0.0..=1.0).contains(v.get_ref()) => *v.get_ref(),
        Some(v) => {
            return Err(value_error(
                key("trace_bandwidth"),
                Some(v.span()),
                format!(
                    "expected the share of the device's VRAM bandwidth the replayed kernels use, from 0 to 1; got {}",
                    v.get_ref()
                ),
            ));
        }
    };
    let bytes_per_us = share * setting.preset.vram_bytes_per_s / 1e6;
    read_replayed(trace, &key("trace"), setting, |bytes| {
        let snapshot = Snapshot::parse(bytes)?;
        Ok::<_, SnapshotError>((snapshot.program(bytes_per_us)?, snapshot.timing()))
    })
}

/// A tenant replaying the unified-memory fault log `log`: its workload name (the file's
/// stem) and the log. Only demand paging (mode `uvm`) has fault batches to replay.
fn fault_log(
    t: &TenantTable,
    log: &Spanned<String>,
    key: &dyn Fn(&str) -> String,
    setting: &Setting,
) -> Result<(String, FaultLog), ScenarioError> {
    refuse_app_keys(t, "a fault log", key, setting.value_error)?;
    paged_only(
        &setting.manager.policy,
        "fault_log replays unified memory's fault batches",
        key("fault_log"),
        Some(log.span()),
        setting.value_error,
    )?;
    read_replayed(log, &key("fault_log"), setting, FaultLog::parse)
}

/// Refuses the keys that size an app (`size`, `repeat`, `idle_between`) on a tenant
/// replaying `what`.
fn refuse_app_keys(
    t: &TenantTable,
    what: &str,
    key: &dyn Fn(&str) -> String,
    value_error: ValueError,
) -> Result<(), ScenarioError> {
    for (field, span) in [
        ("size", t.size.as_ref().map(Spanned::span)),
        ("repeat", t.repeat.as_ref().map(Spanned::span)),
        ("idle_between", t.idle_between.as_ref().map(Spanned::span)),
    ] {
        if span.is_some() {
            return Err(value_error(
                key(field),
                span,
                format!("{field} applies to an app; {what} replays what it recorded"),
            ));
        }
    }
    Ok(())
}

/// Reads the file a tenant replays (`file`, relative to the scenario, under scenario
/// key `key`) and parses it: the workload's name (the file's stem) and what `parse`
/// made of it. An error names the key and the file.
fn read_replayed<T, E: std::fmt::Display>(
    file: &Spanned<String>,
    key: &str,
    setting: &Setting,
    parse: impl FnOnce(&[u8]) -> Result<T, E>,
) -> Result<(String, T), ScenarioError> {
    let path = setting.dir.join(file.get_ref());
    let fail = |message: String| {
        (setting.value_error)(
            key.into(),
            Some(file.span()),
            format!("{}: {message}", path.display()),
        )
    };
    let bytes = std::fs::read(&path).map_err(|e| fail(format!("cannot read it: {e}")))?;
    let parsed = parse(&bytes).map_err(|e| fail(e.to_string()))?;
    let name = path
        .file_stem()
        .map_or_else(|| "trace".into(), |s| s.to_string_lossy().into_owned());
    Ok((name, parsed))
}

/// Tenant `i`'s name: its `name` key, or its workload's name and its index; no other
/// tenant's.
fn name(
    t: &TenantTable,
    i: usize,
    app_name: &str,
    others: &[TenantSpec],
    value_error: ValueError,
) -> Result<String, ScenarioError> {
    let key = || key_of(i)("name");
    let name = match &t.name {
        Some(n) if n.get_ref().trim().is_empty() => {
            return Err(value_error(
                key(),
                Some(n.span()),
                "expected a non-empty name".into(),
            ));
        }
        Some(n) if n.get_ref().chars().count() > MAX_NAME_CHARS => {
            return Err(value_error(
                key(),
                Some(n.span()),
                format!(
                    "expected a name of at most {MAX_NAME_CHARS} characters (it heads report columns); this one has {}",
                    n.get_ref().chars().count()
                ),
            ));
        }
        Some(n) => n.get_ref().clone(),
        // A trace's file stem may be long: the default keeps to the names' limit.
        None => {
            let index = i.to_string();
            let stem: String = app_name
                .chars()
                .take(MAX_NAME_CHARS - index.len())
                .collect();
            stem + &index
        }
    };
    if others.iter().any(|other| other.name == name) {
        return Err(value_error(
            key(),
            t.name.as_ref().map(|n| n.span()),
            format!("expected a name no other tenant has; {name:?} is taken"),
        ));
    }
    Ok(name)
}

/// A tenant's buffers as priorities name them: the runtime's three, then its program's.
struct Buffers<'a> {
    /// Every buffer's label.
    labels: Vec<String>,
    /// The program whose buffers follow the runtime's.
    program: &'a Program,
    /// The runtime's buffers' sizes, in the order of their labels.
    runtime_bytes: [u64; 3],
    /// The manager's chunk size.
    chunk_bytes: u64,
}

impl<'a> Buffers<'a> {
    fn new(program: &'a Program, preset: &Preset, chunk_bytes: u64) -> Self {
        Buffers {
            labels: ["runtime_stack", "runtime_code", "runtime_constant"]
                .iter()
                .map(|l| (*l).to_owned())
                .chain(program.buffers.iter().map(|b| b.label.clone()))
                .collect(),
            program,
            runtime_bytes: [
                preset.runtime_stack_bytes,
                preset.runtime_code_bytes,
                preset.runtime_constant_bytes,
            ],
            chunk_bytes,
        }
    }

    /// Whether a buffer has `label`.
    fn has(&self, label: &String) -> bool {
        self.labels.contains(label)
    }

    /// Chunks of the buffer `label` at this chunk size: lists for priority-chunk must
    /// fit.
    fn chunks_of(&self, label: &str) -> usize {
        let bytes = self.labels[..3]
            .iter()
            .zip(self.runtime_bytes)
            .find(|(l, _)| *l == label)
            .map(|(_, b)| b)
            .or_else(|| {
                self.program
                    .buffers
                    .iter()
                    .find(|b| b.label == label)
                    .map(|b| b.bytes)
            })
            .unwrap_or(0);
        bytes.div_ceil(self.chunk_bytes) as usize
    }
}

/// A tenant's buffer priorities and per-chunk priorities, by buffer label.
type Priorities = (BTreeMap<String, i32>, BTreeMap<String, Vec<i32>>);

/// A tenant's buffer and chunk priorities: a priorities file first; the scenario's own
/// entries override it.
fn priorities(
    t: &TenantTable,
    workload: &Workload,
    key: &dyn Fn(&str) -> String,
    setting: &Setting,
) -> Result<Priorities, ScenarioError> {
    let value_error = setting.value_error;
    let app_name = &workload.app_name;
    let buffers = Buffers::new(
        &workload.program,
        setting.preset,
        setting.manager.chunk_bytes,
    );
    let unknown_label = |field: &str, label: &str, span: std::ops::Range<usize>| {
        value_error(
            key(&format!("{field}.{label}")),
            Some(span),
            format!(
                "{app_name} has no buffer {label:?}; expected one of: {}",
                buffers.labels.join(", ")
            ),
        )
    };
    let mut from_file = match &t.priorities_file {
        None => PrioritiesFile::default(),
        Some(file) => priorities_file(file, app_name, &buffers, key, setting)?,
    };
    let mut priorities = std::mem::take(&mut from_file.priorities);
    for (label, priority) in &t.priorities {
        if !buffers.has(label) {
            return Err(unknown_label("priorities", label, priority.span()));
        }
        priorities.insert(label.clone(), *priority.get_ref());
    }
    let size = t.size.as_ref().map_or("default", |s| s.get_ref());
    let per_chunk = setting.manager.policy.uses_chunk_priorities();
    if per_chunk && let Some(file) = &t.priorities_file {
        check_file_chunks(&from_file, file, app_name, size, &buffers, key, value_error)?;
    }
    let mut chunk_priorities = from_file.chunk_priorities;
    for (label, list) in &t.chunk_priorities {
        if !buffers.has(label) {
            return Err(unknown_label("chunk_priorities", label, list.span()));
        }
        // Shorter lists are allowed: missing chunks take the buffer's priority.
        if per_chunk && list.get_ref().len() > buffers.chunks_of(label) {
            return Err(value_error(
                key(&format!("chunk_priorities.{label}")),
                Some(list.span()),
                format!(
                    "expected at most {} entries, one per {} chunk of {label} at size {size:?}; got {}",
                    buffers.chunks_of(label),
                    format_bytes(buffers.chunk_bytes),
                    list.get_ref().len()
                ),
            ));
        }
        chunk_priorities.insert(label.clone(), list.get_ref().clone());
    }
    Ok((priorities, chunk_priorities))
}

/// The priorities file `file` names, made for `app_name`'s `buffers`.
fn priorities_file(
    file: &Spanned<String>,
    app_name: &str,
    buffers: &Buffers,
    key: &dyn Fn(&str) -> String,
    setting: &Setting,
) -> Result<PrioritiesFile, ScenarioError> {
    // "{app}" stands for the tenant's app, so that a sweep over apps keeps each app's
    // own profile.
    let relative = file.get_ref().replace("{app}", app_name);
    let file_path = setting.dir.join(relative);
    let loaded = PrioritiesFile::load(&file_path)
        .map_err(|m| (setting.value_error)(key("priorities_file"), Some(file.span()), m))?;
    let unknown = loaded
        .priorities
        .keys()
        .chain(loaded.chunk_priorities.keys())
        .find(|l| !buffers.has(l));
    if let Some(label) = unknown {
        return Err((setting.value_error)(
            key("priorities_file"),
            Some(file.span()),
            format!(
                "{}: {app_name} has no buffer {label:?}; was the file made for another app?",
                file_path.display(),
            ),
        ));
    }
    Ok(loaded)
}

/// Refuses a priorities file (`file`) whose chunk lists have another count than the
/// buffers have chunks at this chunk size and input `size`.
fn check_file_chunks(
    from_file: &PrioritiesFile,
    file: &Spanned<String>,
    app_name: &str,
    size: &str,
    buffers: &Buffers,
    key: &dyn Fn(&str) -> String,
    value_error: ValueError,
) -> Result<(), ScenarioError> {
    // The profiler writes one entry per chunk: another count means the file was made
    // for another chunk size or input size, and would apply wrongly.
    let Some((label, list)) = from_file
        .chunk_priorities
        .iter()
        .find(|(label, list)| list.len() != buffers.chunks_of(label))
    else {
        return Ok(());
    };
    let chunk_bytes = buffers.chunk_bytes;
    let made_for = format!(
        "made for {} at size {}",
        from_file.app.as_deref().unwrap_or("an unnamed app"),
        from_file.size.as_deref().unwrap_or("unknown")
    );
    Err(value_error(
        key("priorities_file"),
        Some(file.span()),
        format!(
            "chunk_priorities.{label} has {} entries, but {label} has {} chunks of {} at size {size:?} ({}); regenerate it with gpuswap profile {} --size {size} --chunk-size {}",
            list.len(),
            buffers.chunks_of(label),
            format_bytes(chunk_bytes),
            made_for,
            app_name,
            format_bytes(chunk_bytes).replace(' ', "").replace(".0", "")
        ),
    ))
}
