//! The core driven by a driver that delays its answers, interleaves them with new
//! requests in random order, and sends answers nobody asked for. Whatever the order, the
//! manager keeps its books, answers every request exactly once (at most once if its
//! tenant exits first), maps before it grants, keeps at most one copy outstanding, and
//! refuses a bogus answer without changing state. Tenants exit at any point (mid-
//! suspension, mid-copy, while they wait) and copies fail: nothing of an exited tenant
//! stays in the books, its outstanding copy is cancelled, and nobody waits for ever.

use std::collections::{BTreeMap, BTreeSet};

use gpuswap_core::{
    Action, AllocRequest, BufferId, BufferKind, CopyId, Dma, Execution, KernelStats, Manager,
    ManagerConfig, Mapping, PolicySettings, ProtocolError, Reply, RequestId, TenantId,
};
use proptest::prelude::*;

const MIB: u64 = 1 << 20;
const TENANTS: u32 = 5;

/// `default` cases, or as many as `PROPTEST_CASES` asks for (long runs).
fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One thing the driver does next.
#[derive(Clone, Debug)]
enum Step {
    Alloc {
        tenant: u32,
        mib: u64,
    },
    Free {
        pick: usize,
    },
    /// Answer the outstanding suspension or copy, if any.
    Answer,
    /// Answer something nobody asked for.
    Bogus {
        copy: u64,
        tenant: u32,
    },
    Timeout,
    KernelFinished {
        tenant: u32,
    },
    /// The tenant exits (ends, crashes, is killed).
    Exit {
        tenant: u32,
    },
    /// The outstanding copy, if any, fails.
    FailCopy,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0u32..TENANTS, 1u64..24).prop_map(|(tenant, mib)| Step::Alloc { tenant, mib }),
        1 => any::<usize>().prop_map(|pick| Step::Free { pick }),
        4 => Just(Step::Answer),
        1 => (0u64..50, 0u32..TENANTS).prop_map(|(copy, tenant)| Step::Bogus { copy, tenant }),
        1 => Just(Step::Timeout),
        1 => (0u32..TENANTS).prop_map(|tenant| Step::KernelFinished { tenant }),
        1 => (0u32..TENANTS).prop_map(|tenant| Step::Exit { tenant }),
        1 => Just(Step::FailCopy),
    ]
}

/// What the driver has seen and still owes.
#[derive(Default)]
struct Driver {
    suspend: Option<TenantId>,
    /// The outstanding copy and its tenant.
    copy: Option<(CopyId, TenantId)>,
    suspended: BTreeSet<TenantId>,
    mapped: BTreeMap<BufferId, TenantId>,
    answered: BTreeMap<RequestId, u32>,
    live: Vec<(TenantId, BufferId)>,
    exited: BTreeSet<TenantId>,
}

impl Driver {
    /// Takes every action the manager has decided, checking the protocol as it goes.
    fn drain(&mut self, m: &mut Manager) -> Result<(), TestCaseError> {
        while let Some(action) = m.poll_action() {
            match action {
                Action::Execution(Execution::Suspend { tenant, .. }) => {
                    prop_assert!(self.suspend.is_none() && self.copy.is_none());
                    prop_assert!(self.suspended.insert(tenant), "{tenant} suspended twice");
                    self.suspend = Some(tenant);
                }
                Action::Execution(Execution::Resume { tenant }) => {
                    prop_assert!(self.suspended.remove(&tenant), "{tenant} not suspended");
                }
                Action::Execution(Execution::PolicyRan { .. }) => {}
                Action::Execution(Execution::Kill { tenant, .. }) => self.exit(tenant),
                Action::Dma(Dma::Copy { copy, tenant, .. }) => {
                    prop_assert!(self.copy.is_none(), "two copies outstanding");
                    prop_assert!(!self.exited.contains(&tenant), "copy for exited {tenant}");
                    self.copy = Some((copy, tenant));
                }
                Action::Dma(Dma::Cancel { copy }) => {
                    prop_assert_eq!(self.copy.map(|c| c.0), Some(copy), "cancel of another copy");
                    self.copy = None;
                }
                Action::Mapping(Mapping::Map { buffer, tenant, .. }) => {
                    prop_assert!(self.mapped.insert(buffer, tenant).is_none());
                }
                Action::Mapping(Mapping::Remap { chunk, .. }) => {
                    // Chunks of freed buffers are never remapped.
                    prop_assert!(
                        self.mapped.contains_key(&chunk.buffer),
                        "remap of unmapped {chunk:?}"
                    );
                }
                Action::Mapping(Mapping::Unmap { buffer, .. }) => {
                    prop_assert!(
                        self.mapped.remove(&buffer).is_some(),
                        "unmap of unmapped {buffer}"
                    );
                }
                Action::Reply(Reply::Grant {
                    request,
                    tenant,
                    buffer,
                }) => {
                    prop_assert!(self.mapped.contains_key(&buffer), "granted before mapped");
                    prop_assert!(!self.exited.contains(&tenant), "grant to exited {tenant}");
                    *self.answered.entry(request).or_default() += 1;
                    self.live.push((tenant, buffer));
                }
                Action::Reply(Reply::Fail { request, .. }) => {
                    *self.answered.entry(request).or_default() += 1;
                }
                other => prop_assert!(false, "unexpected {other:?}"),
            }
        }
        Ok(())
    }

    /// Answers what is outstanding.
    fn answer(&mut self, m: &mut Manager) -> Result<(), TestCaseError> {
        if let Some(tenant) = self.suspend.take() {
            prop_assert_eq!(m.handle_suspended(tenant), Ok(()));
        } else if let Some((copy, _)) = self.copy.take() {
            prop_assert_eq!(m.handle_copy_done(copy), Ok(()));
        }
        self.drain(m)
    }

    /// Forgets what the driver owes an exited tenant: the manager answers nothing more
    /// about it (an outstanding copy of it is cancelled in the actions that follow).
    fn exit(&mut self, tenant: TenantId) {
        self.exited.insert(tenant);
        self.suspended.remove(&tenant);
        if self.suspend == Some(tenant) {
            self.suspend = None;
        }
        self.live.retain(|(t, _)| *t != tenant);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(200)))]
    #[test]
    fn any_answer_order_keeps_the_protocol(steps in proptest::collection::vec(step(), 1..120)) {
        let mut m = Manager::new(ManagerConfig {
            vram_bytes: 48 * MIB,
            host_bytes: 1 << 40,
            chunk_bytes: 4 * MIB,
            policy: PolicySettings::named("gpuswap"),
            return_interval_ns: 1_000,
            seed: 3,
            scheduling: Default::default(),
            gpu_time: Default::default(),
            idle: Default::default(),
        });
        let mut d = Driver::default();
        let mut requests = 0u64;
        let mut tenant_of = Vec::new();
        let mut now = 0;
        for s in steps {
            match s {
                Step::Alloc { tenant, .. } if d.exited.contains(&TenantId(tenant)) => {}
                Step::Alloc { tenant, mib } => {
                    tenant_of.push(TenantId(tenant));
                    m.handle_alloc(AllocRequest {
                        request: RequestId(requests),
                        tenant: TenantId(tenant),
                        bytes: mib * MIB,
                        kind: BufferKind::Device,
                        priority: None,
                        chunk_priorities: Vec::new(),
                    });
                    requests += 1;
                }
                Step::Free { pick } if !d.live.is_empty() => {
                    let (tenant, buffer) = d.live.remove(pick % d.live.len());
                    prop_assert_eq!(m.handle_free(tenant, buffer), Ok(()));
                }
                Step::Free { .. } => {}
                Step::Answer => d.answer(&mut m)?,
                Step::Bogus { copy, tenant } => {
                    let (copy, tenant) = (CopyId(copy), TenantId(tenant));
                    let before = (m.vram_used_bytes(), m.relocating());
                    if d.copy.map(|c| c.0) != Some(copy) {
                        let refused = matches!(
                            m.handle_copy_done(copy),
                            Err(ProtocolError::UnexpectedCopyDone { .. })
                        );
                        prop_assert!(refused, "a bogus copy was accepted");
                    }
                    if d.suspend != Some(tenant) {
                        prop_assert_eq!(
                            m.handle_suspended(tenant),
                            Err(ProtocolError::UnexpectedSuspended { tenant })
                        );
                    }
                    prop_assert_eq!(before, (m.vram_used_bytes(), m.relocating()));
                }
                Step::Timeout => {
                    now += 1_000;
                    m.handle_timeout(now);
                }
                Step::KernelFinished { tenant } => {
                    m.handle_kernel_finished(TenantId(tenant), &KernelStats::default());
                }
                Step::Exit { tenant } => {
                    let tenant = TenantId(tenant);
                    d.exit(tenant);
                    m.handle_tenant_exit(tenant);
                    d.drain(&mut m)?;
                    prop_assert!(d.copy.is_none_or(|c| c.1 != tenant), "copy of exited {tenant} not cancelled");
                    prop_assert!(m.buffers_of(tenant).next().is_none());
                    prop_assert_eq!(m.usage(tenant).vram_bytes + m.usage(tenant).host_bytes, 0);
                    prop_assert!(d.mapped.values().all(|t| *t != tenant));
                }
                Step::FailCopy => {
                    if let Some((copy, _)) = d.copy.take() {
                        prop_assert_eq!(m.handle_copy_failed(copy), Ok(()));
                    }
                }
            }
            d.drain(&mut m)?;
            prop_assert_eq!(m.check_invariants(), Ok(()));
        }
        // Answer everything still owed: every request is then answered exactly once and
        // every suspended tenant resumed.
        while d.suspend.is_some() || d.copy.is_some() {
            d.answer(&mut m)?;
        }
        prop_assert!(!m.relocating());
        // Requests of exited tenants may go unanswered, the others may not.
        prop_assert!(d.answered.len() as u64 <= requests);
        prop_assert!(d.answered.values().all(|n| *n == 1));
        for r in 0..requests {
            let tenant = tenant_of[r as usize];
            prop_assert!(d.answered.contains_key(&RequestId(r)) || d.exited.contains(&tenant), "request {r} never answered");
        }
        prop_assert!(d.suspended.is_empty());
        prop_assert_eq!(m.check_invariants(), Ok(()));
    }
}
