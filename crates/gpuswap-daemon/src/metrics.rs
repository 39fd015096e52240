//! The daemon's metrics in the OpenMetrics text format (issue 42, item 3), built from a
//! [`Snapshot`], so that a scrape and `gpuswap top --json` of the same `generation`
//! carry the same figures. A pure function: serve.rs answers the HTTP requests
//! (`--metrics-listen`).
//!
//! `prometheus-client` encodes (the Prometheus project's Rust client: the format's
//! escaping, `# TYPE`/`# HELP`/`# UNIT` lines, `_total` suffixes and the `# EOF` end are
//! its, not ours).

use gpuswap_wire::{LatencyHistogram, MOVE_LATENCY_BOUNDS_NS, Snapshot};
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::{Registry, Unit};

/// The content type of [`encode_snapshot`]'s text (OpenMetrics 1.0).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A tenant's labels: its number, process and name.
type TenantLabels = Vec<(String, String)>;

/// A byte or count figure as a gauge's value (saturating: no figure reaches 2^63).
fn gauge(value: u64) -> Gauge {
    let g = Gauge::default();
    g.set(i64::try_from(value).unwrap_or(i64::MAX));
    g
}

fn counter(value: u64) -> Counter {
    let c = Counter::default();
    c.inc_by(value);
    c
}

/// The snapshot's move latencies as a histogram in seconds: the daemon keeps the
/// buckets' counts (the snapshot carries them), so this encodes them as they are rather
/// than replaying observations into a `Histogram`.
#[derive(Debug)]
struct MoveLatency(LatencyHistogram);

impl TypedMetric for MoveLatency {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for MoveLatency {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let counts = &self.0.counts;
        // The last bucket is +Inf, which the encoder writes as `le="+Inf"`.
        let buckets: Vec<(f64, u64)> = MOVE_LATENCY_BOUNDS_NS
            .iter()
            .map(|&ns| ns as f64 / 1e9)
            .chain(std::iter::once(f64::INFINITY))
            .enumerate()
            .map(|(i, bound)| (bound, counts.get(i).copied().unwrap_or(0)))
            .collect();
        encoder.encode_histogram::<NoLabelSet>(
            self.0.sum_ns as f64 / 1e9,
            self.0.count(),
            &buckets,
            None,
        )
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// The snapshot's figures as OpenMetrics text.
pub fn encode_snapshot(s: &Snapshot) -> String {
    let mut registry = Registry::with_prefix("gpuswap");
    let daemon_gauges: [(&str, &str, Option<Unit>, u64); 8] = [
        (
            "vram",
            "VRAM the daemon manages",
            Some(Unit::Bytes),
            s.vram_bytes,
        ),
        (
            "vram_used",
            "VRAM accounted to tenants",
            Some(Unit::Bytes),
            s.vram_used_bytes,
        ),
        (
            "vram_free",
            "managed VRAM not accounted to tenants",
            Some(Unit::Bytes),
            s.vram_bytes.saturating_sub(s.vram_used_bytes),
        ),
        (
            "host",
            "host memory the daemon may fill",
            Some(Unit::Bytes),
            s.host_bytes,
        ),
        (
            "host_used",
            "host memory holding evicted chunks",
            Some(Unit::Bytes),
            s.host_used_bytes,
        ),
        ("tenants", "connected tenants", None, s.tenants.len() as u64),
        (
            "snapshot_generation",
            "the books' version: equal in a scrape and a `gpuswap top` of the same state",
            None,
            s.generation,
        ),
        (
            "held_by_gone",
            "VRAM held by processes the daemon no longer serves, until they exit",
            Some(Unit::Bytes),
            s.held_by_gone_bytes,
        ),
    ];
    for (name, help, unit, value) in daemon_gauges {
        match unit {
            Some(unit) => registry.register_with_unit(name, help, unit, gauge(value)),
            None => registry.register(name, help, gauge(value)),
        }
    }
    let daemon_counters = [
        (
            "tenants_served",
            "tenants served since the start",
            s.tenants_served,
        ),
        (
            "handovers",
            "times the GPU passed from one tenant to another under turns",
            s.handovers,
        ),
        (
            "gpu_time_switches",
            "times the automatic choice of GPU time changed",
            s.switches,
        ),
        (
            "allocations_failed",
            "allocations answered AllocFailed",
            s.allocations_failed,
        ),
        (
            "batch_moved_bytes",
            "bytes moved by bulk moves",
            s.batch_moved_bytes,
        ),
        (
            "claims_refused",
            "contracts named by processes not theirs to take (they run under the default)",
            s.claims_refused,
        ),
    ];
    for (name, help, value) in daemon_counters {
        registry.register(name, help, counter(value));
    }
    let refusals = Family::<Vec<(String, String)>, Counter>::default();
    for (reason, n) in &s.refusals {
        refusals
            .get_or_create(&vec![("reason".to_owned(), reason.clone())])
            .inc_by(*n);
    }
    registry.register("refusals", "connections refused, by reason", refusals);
    // Named in seconds without a `# UNIT` line: openmetrics-parser 0.5 refuses units
    // on histograms.
    registry.register(
        "move_latency_seconds",
        "moves (a chunk, or a bulk move) from the daemon's command to the process's answer",
        MoveLatency(s.move_latency.clone()),
    );
    register_tenants(&mut registry, s);
    let mut text = String::new();
    encode(&mut text, &registry).expect("writing to a String cannot fail");
    text
}

/// The per-tenant families, labelled by tenant number, pid and name.
fn register_tenants(registry: &mut Registry, s: &Snapshot) {
    let labels = |t: &gpuswap_wire::TenantRow| -> TenantLabels {
        vec![
            ("tenant".to_owned(), t.tenant.to_string()),
            ("pid".to_owned(), t.pid.to_string()),
            ("name".to_owned(), t.name.clone()),
        ]
    };
    type Figure = fn(&gpuswap_wire::TenantRow) -> u64;
    let gauges: [(&str, &str, Figure); 6] = [
        ("tenant_vram", "its buffers' bytes in VRAM", |t| {
            t.vram_bytes
        }),
        ("tenant_host", "its buffers' bytes in host memory", |t| {
            t.host_bytes
        }),
        (
            "tenant_managed",
            "its managed memory (cuMemAllocManaged), paged by the driver, never moved by the daemon",
            |t| t.managed_bytes,
        ),
        (
            "tenant_pinned",
            "its buffers pinned in place because another process maps them (IPC)",
            |t| t.pinned_bytes,
        ),
        (
            "tenant_vram_guarantee",
            "its contract's VRAM guarantee",
            |t| t.contract.vram_guarantee_bytes,
        ),
        (
            "tenant_vram_limit",
            "its contract's VRAM limit (0: none)",
            |t| t.contract.vram_limit_bytes.unwrap_or(0),
        ),
    ];
    for (name, help, figure) in gauges {
        let family = Family::<TenantLabels, Gauge>::default();
        for t in &s.tenants {
            family
                .get_or_create(&labels(t))
                .set(i64::try_from(figure(t)).unwrap_or(i64::MAX));
        }
        registry.register_with_unit(name, help, Unit::Bytes, family);
    }
    let counters: [(&str, &str, Figure); 5] = [
        (
            "tenant_evicted_bytes",
            "bytes moved from VRAM to host memory",
            |t| t.evicted_bytes,
        ),
        ("tenant_returned_bytes", "bytes moved back to VRAM", |t| {
            t.returned_bytes
        }),
        ("tenant_moves", "chunk moves", |t| t.relocations),
        (
            "tenant_waits",
            "allocations that waited for a relocation",
            |t| t.waits,
        ),
        (
            "tenant_wait_nanoseconds",
            "time allocations waited, in all",
            |t| t.wait_ns,
        ),
    ];
    for (name, help, figure) in counters {
        let family = Family::<TenantLabels, Counter>::default();
        for t in &s.tenants {
            family.get_or_create(&labels(t)).inc_by(figure(t));
        }
        registry.register(name, help, family);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuswap_wire::{ContractRow, TenantRow};
    use openmetrics_parser::OpenMetricsValue;
    use openmetrics_parser::openmetrics::parse_openmetrics;

    #[test]
    fn a_snapshot_encodes_as_openmetrics_a_real_parser_reads_back() {
        let mut snap = Snapshot {
            vram_bytes: 64 << 20,
            vram_used_bytes: 48 << 20,
            generation: 7,
            handovers: 2,
            claims_refused: 4,
            ..Snapshot::default()
        };
        snap.refusals.insert("user".into(), 3);
        // Two moves of 2 ms, one of 40 ms and one beyond every bound.
        for ns in [2_000_000, 2_000_000, 40_000_000, 20_000_000_000] {
            snap.move_latency.record(ns);
        }
        snap.tenants.push(TenantRow {
            tenant: 1,
            pid: 4242,
            name: "a \"quoted\" name".into(),
            vram_bytes: 32 << 20,
            host_bytes: 8 << 20,
            relocations: 5,
            contract: ContractRow {
                vram_guarantee_bytes: 16 << 20,
                ..ContractRow::default()
            },
            ..TenantRow::default()
        });
        let text = encode_snapshot(&snap);
        let parsed = parse_openmetrics(&text).unwrap_or_else(|e| panic!("{e:?}\n{text}"));
        // A sample by its labels' (name, value) pairs, whatever order the parser keeps.
        let value = |family: &str, labels: &[(&str, &str)]| -> f64 {
            let f = parsed
                .families
                .get(family)
                .unwrap_or_else(|| panic!("no {family} in\n{text}"));
            let sample = f
                .iter_samples()
                .find(|s| {
                    let set = s.get_labelset().unwrap();
                    set.iter().count() == labels.len()
                        && labels
                            .iter()
                            .all(|(k, v)| set.get_label_value(k) == Some(*v))
                })
                .unwrap_or_else(|| panic!("no {family}{labels:?} in\n{text}"));
            match &sample.value {
                OpenMetricsValue::Gauge(n) => n.as_f64(),
                OpenMetricsValue::Counter(c) => c.value.as_f64(),
                other => panic!("{family}: {other:?}"),
            }
        };
        assert_eq!(value("gpuswap_vram_bytes", &[]), (64 << 20) as f64);
        assert_eq!(value("gpuswap_vram_free_bytes", &[]), (16 << 20) as f64);
        assert_eq!(value("gpuswap_snapshot_generation", &[]), 7.0);
        assert_eq!(value("gpuswap_handovers", &[]), 2.0);
        assert_eq!(value("gpuswap_claims_refused", &[]), 4.0);
        assert_eq!(value("gpuswap_refusals", &[("reason", "user")]), 3.0);
        let who = [
            ("tenant", "1"),
            ("pid", "4242"),
            ("name", "a \"quoted\" name"),
        ];
        assert_eq!(value("gpuswap_tenant_vram_bytes", &who), (32 << 20) as f64);
        assert_eq!(
            value("gpuswap_tenant_vram_guarantee_bytes", &who),
            (16 << 20) as f64
        );
        assert_eq!(value("gpuswap_tenant_moves", &who), 5.0);
        let latency = parsed.families.get("gpuswap_move_latency_seconds").unwrap();
        let sample = latency.iter_samples().next().unwrap();
        let OpenMetricsValue::Histogram(h) = &sample.value else {
            panic!("not a histogram: {:?}", sample.value)
        };
        assert_eq!(h.count, Some(4));
        assert!(
            (h.sum.as_ref().unwrap().as_f64() - 20.044).abs() < 1e-9,
            "{h:?}"
        );
        // Cumulative: none within 1 ms, two within 3.16 ms, three within 100 ms, all.
        let within = |le: f64| {
            h.buckets
                .iter()
                .find(|b| (b.upper_bound - le).abs() < 1e-9 * le.max(1.0))
                .unwrap_or_else(|| panic!("no bucket {le} in {h:?}"))
                .count
                .as_f64()
        };
        assert_eq!(within(0.001), 0.0);
        assert_eq!(within(0.003162278), 2.0);
        assert_eq!(within(0.1), 3.0);
        assert_eq!(within(10.0), 3.0);
    }
}
