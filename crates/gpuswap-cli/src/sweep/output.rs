//! A sweep's per-run tables: results.csv (a row per run) and, in a mode that pages,
//! patterns.csv (each managed allocation's pattern timeline); each point's records go on
//! to the summary.

use std::path::{Path, PathBuf};

use toml::Value;

use super::axis::value_text;
use super::error::SweepError;
use super::execute::Row;
use super::figures::{Kind, TENANT_COLUMNS, TimelineRow};
use super::plan::Plan;
use super::records::{PointRecords, TENANTS_FAILED};
use super::summary::Summary;

/// The columns of results.csv: the point, its settings, the run, the summary metrics,
/// each tenant's columns and the count of tenants that failed (last, so that scripts
/// written before it read the others where they were).
pub(super) fn results_header(plan: &Plan) -> Vec<String> {
    let mut header: Vec<String> = vec!["point".into()];
    header.extend(plan.axes.iter().map(|a| a.key.clone()));
    header.extend(["run", "seed", "error"].map(String::from));
    header.extend(plan.kind().metrics().iter().map(|m| (*m).to_owned()));
    for t in &plan.tenants() {
        header.extend(TENANT_COLUMNS.iter().map(|(c, _)| format!("{t}.{c}")));
        header.push(format!("{t}.error"));
    }
    header.push(TENANTS_FAILED.into());
    header
}

/// The columns of patterns.csv, which sweeps in a mode that pages write: the point, its
/// settings and a [`TimelineRow`]'s.
pub(super) fn patterns_header(plan: &Plan) -> Option<Vec<String>> {
    if plan.kind() != Kind::PagedTenants {
        return None;
    }
    let mut header: Vec<String> = vec!["point".into()];
    header.extend(plan.axes.iter().map(|a| a.key.clone()));
    header.extend(TimelineRow::COLUMNS.map(String::from));
    Some(header)
}

/// A row of results.csv; a failed run has only its error, padded to `columns`.
fn results_record(row: &Row, point: &[Value], columns: usize) -> Vec<String> {
    let mut cells = vec![row.point.to_string()];
    cells.extend(point.iter().map(value_text));
    cells.extend([row.run.to_string(), row.seed.to_string()]);
    match &row.result {
        Ok(figures) => {
            cells.push(String::new());
            cells.extend(
                figures
                    .metrics
                    .iter()
                    .map(|v| v.map_or(String::new(), |v| format!("{v}"))),
            );
            for t in &figures.tenants {
                match t {
                    Some(t) => cells.extend(t.cells()),
                    None => cells.extend(vec![String::new(); TENANT_COLUMNS.len() + 1]),
                }
            }
            cells.push(figures.tenants_failed.to_string());
        }
        Err(e) => {
            cells.push(e.clone());
            cells.resize(columns, String::new());
        }
    }
    cells
}

fn io_error(what: &Path, e: &dyn std::fmt::Display) -> SweepError {
    SweepError::Output(format!("{}: {e}", what.display()))
}

/// One CSV table being written.
struct Table {
    /// Its name once finished.
    path: PathBuf,
    /// Where records go until it is: its partial file, so that a folder never holds a
    /// table with part of its rows.
    writing: PathBuf,
    writer: csv::Writer<std::fs::File>,
}

impl Table {
    fn create(path: PathBuf, header: &[String]) -> Result<Self, SweepError> {
        let writing = crate::text::partial_path(&path);
        let mut writer = csv::Writer::from_path(&writing).map_err(|e| io_error(&writing, &e))?;
        writer
            .write_record(header)
            .map_err(|e| io_error(&writing, &e))?;
        Ok(Self {
            path,
            writing,
            writer,
        })
    }

    /// Reopens the partial file of an interrupted sweep's table, cut to `bytes` (what
    /// its finished points wrote), to write on after them.
    fn reopen(path: PathBuf, bytes: u64) -> Result<Self, SweepError> {
        let writing = crate::text::partial_path(&path);
        // Appending: every write goes after the cut, whatever the file offset.
        let file = std::fs::OpenOptions::new()
            .append(true)
            .open(&writing)
            .and_then(|f| {
                f.set_len(bytes)?;
                Ok(f)
            })
            .map_err(|e| io_error(&writing, &e))?;
        Ok(Self {
            path,
            writing,
            writer: csv::Writer::from_writer(file),
        })
    }

    fn write(&mut self, records: &[Vec<String>]) -> Result<(), SweepError> {
        let io = |e: &dyn std::fmt::Display| io_error(&self.writing, e);
        for record in records {
            self.writer.write_record(record).map_err(|e| io(&e))?;
        }
        // On disk at once: a sweep killed later keeps every finished point's rows.
        self.writer.flush().map_err(|e| io(&e))
    }

    fn finish(mut self) -> Result<(), SweepError> {
        self.writer
            .flush()
            .map_err(|e| io_error(&self.writing, &e))?;
        std::fs::rename(&self.writing, &self.path).map_err(|e| io_error(&self.path, &e))
    }
}

/// A sweep's outputs written as points complete: results.csv (and patterns.csv, in a
/// mode that pages) record by record, and the summary's statistics per point. Nothing
/// per run outlives its point.
pub(super) struct Outputs<'a> {
    plan: &'a Plan,
    results: Table,
    patterns: Option<Table>,
    columns: usize,
    summary: Summary<'a>,
}

impl<'a> Outputs<'a> {
    /// Creates `out` and the tables with their headers, under partial names until
    /// [`Outputs::finish`] renames them: a folder never holds a results.csv with part of
    /// its rows (what a sweep killed midway would leave).
    pub(super) fn create(out: &Path, plan: &'a Plan) -> Result<Self, SweepError> {
        std::fs::create_dir_all(out).map_err(|e| io_error(out, &e))?;
        Self::open(out, plan, |_, path, header| Table::create(path, header))
    }

    /// The outputs of an interrupted sweep in `out`, to go on with: its partial tables
    /// cut to `bytes` (results.csv's, then patterns.csv's, as [`Outputs::bytes`] gave
    /// them after its last finished point). The finished points' records must then be
    /// given to [`Outputs::replay`], in order, for the summary.
    pub(super) fn reopen(out: &Path, plan: &'a Plan, bytes: [u64; 2]) -> Result<Self, SweepError> {
        Self::open(out, plan, |i, path, _| Table::reopen(path, bytes[i]))
    }

    /// The outputs with results.csv and patterns.csv (if the mode pages) opened by
    /// `table(i, path, header)`, `i` being 0 for results.csv and 1 for patterns.csv.
    fn open(
        out: &Path,
        plan: &'a Plan,
        table: impl Fn(usize, PathBuf, &[String]) -> Result<Table, SweepError>,
    ) -> Result<Self, SweepError> {
        let header = results_header(plan);
        let results = table(0, out.join("results.csv"), &header)?;
        let patterns = patterns_header(plan)
            .map(|header| table(1, out.join("patterns.csv"), &header))
            .transpose()?;
        Ok(Self {
            plan,
            results,
            patterns,
            columns: header.len(),
            summary: Summary::new(plan),
        })
    }

    /// How many bytes the tables hold so far (results.csv's, patterns.csv's): where an
    /// interrupted sweep goes on from.
    pub(super) fn bytes(&self) -> Result<[u64; 2], SweepError> {
        let len = |t: &Table| {
            t.writer
                .get_ref()
                .metadata()
                .map(|m| m.len())
                .map_err(|e| io_error(&t.writing, &e))
        };
        Ok([
            len(&self.results)?,
            self.patterns.as_ref().map_or(Ok(0), len)?,
        ])
    }

    /// Adds a point already written (by the interrupted sweep) to the summary.
    pub(super) fn replay(&mut self, records: &PointRecords) -> Result<(), SweepError> {
        self.summary.add(records).map_err(SweepError::BadInput)
    }

    /// The records of the rows of point `p`.
    pub(super) fn records(&self, p: usize, rows: &[Row]) -> PointRecords {
        let values = &self.plan.points[p];
        let patterns = rows
            .iter()
            .flat_map(|row| {
                let timeline = row.result.iter().flat_map(|f| &f.timeline);
                timeline.map(move |t| {
                    let mut cells = vec![p.to_string()];
                    cells.extend(values.iter().map(value_text));
                    cells.push(row.run.to_string());
                    cells.extend(t.cells());
                    cells
                })
            })
            .collect();
        PointRecords {
            point: p,
            results: rows
                .iter()
                .map(|row| results_record(row, values, self.columns))
                .collect(),
            patterns,
        }
    }

    /// Writes a point's records (points come in order) and adds it to the summary; a
    /// cell the summary cannot read is bad input.
    pub(super) fn point(&mut self, records: &PointRecords) -> Result<(), SweepError> {
        self.results.write(&records.results)?;
        if let Some(patterns) = self.patterns.as_mut() {
            patterns.write(&records.patterns)?;
        }
        self.summary.add(records).map_err(SweepError::BadInput)
    }

    /// Finishes the tables and hands over the summary.
    pub(super) fn finish(self) -> Result<Summary<'a>, SweepError> {
        self.results.finish()?;
        if let Some(patterns) = self.patterns {
            patterns.finish()?;
        }
        Ok(self.summary)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use gpuswap_sim::report::{Baselines, Report, run_and_report_with};

    use super::*;
    use crate::scenario;
    use crate::sweep::Plan;
    use crate::sweep::figures::{eviction_mean_ns, slowest_phase_ns};
    use crate::sweep::records::error_column;

    /// Two nn tenants; 20 MiB makes them evict, 9 GiB is more than the GTX 480 has.
    const TWO_NN: &str = "seed = 5\n[device]\npreset = \"gtx480\"\n[manager]\nmode = \"gpuswap\"\n\
        [[tenant]]\nname = \"a\"\napp = \"nn\"\nsize = \"rodinia\"\nrepeat = 2\n\
        [[tenant]]\nname = \"b\"\napp = \"nn\"\nsize = \"rodinia\"\nrepeat = 2\n";

    /// What a results.csv column holds, read from the full report (as JSON) rather than
    /// through the sweep's own column table; None for the columns the row itself sets.
    fn from_report(report: &Report, column: &str) -> Option<f64> {
        let json = serde_json::to_value(report).unwrap();
        let number = |v: &serde_json::Value| v.as_f64().unwrap_or_else(|| panic!("{column}: {v}"));
        if ["point", "device.vram_limit", "run", "seed", "error"].contains(&column) {
            return None;
        }
        if let Some((tenant, field)) = column.split_once('.') {
            let t = json["tenants"]
                .as_array()
                .unwrap()
                .iter()
                .find(|t| t["name"] == tenant)
                .unwrap();
            let (summary, stat) = match field {
                "alloc_p50_ns" => ("alloc_latency_ns", "p50"),
                "alloc_p99_ns" => ("alloc_latency_ns", "p99"),
                "eviction_p50_ns" => ("eviction_latency_ns", "p50"),
                "eviction_max_ns" => ("eviction_latency_ns", "max"),
                "victim_pause_p50_ns" => ("victim_pause_ns", "p50"),
                "victim_pause_max_ns" => ("victim_pause_ns", "max"),
                "error" => {
                    assert!(t["error"].is_null());
                    return None;
                }
                field => return Some(number(&t[field])),
            };
            return Some(number(&t[summary][stat]));
        }
        Some(match column {
            "slowest_phase_ns" => slowest_phase_ns(report).unwrap() as f64,
            "eviction_mean_ns" => eviction_mean_ns(report).unwrap(),
            "slowest_total_ns" => json["tenants"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| number(&t["total_ns"]))
                .fold(0.0, f64::max),
            system => number(&json["system"][system]),
        })
    }

    #[test]
    fn rows_carry_exactly_the_results_columns() {
        let path = Path::new("two-nn.toml");
        let vary = ["device.vram_limit=20MiB,9GiB".to_owned()];
        let plan = Plan::new(path, TWO_NN, &vary, Some(1)).unwrap();
        let mut rows = Vec::new();
        plan.execute(&[0, 1], Some(1), true, |_, point_rows| {
            rows.extend(point_rows);
            Ok(())
        })
        .unwrap();
        assert_eq!(rows.len(), 2);
        let header = results_header(&plan);

        let mut s = scenario::parse(
            path,
            &TWO_NN.replace("gtx480\"", "gtx480\"\nvram_limit = \"20MiB\""),
        )
        .unwrap();
        s.set_seed(rows[0].seed);
        let report =
            run_and_report_with(&s.name, s.seed, &s.config, &Baselines::default()).unwrap();
        assert!(
            report.tenants.iter().any(|t| t.bytes_evicted > 0),
            "no evictions to check"
        );
        let record = results_record(&rows[0], &plan.points[0], header.len());
        assert_eq!(record.len(), header.len());
        for (column, cell) in header.iter().zip(&record) {
            let Some(want) = from_report(&report, column) else {
                continue;
            };
            let got: f64 = cell
                .parse()
                .unwrap_or_else(|_| panic!("{column}: {cell:?}"));
            // Slowdowns are written with six decimals.
            assert!(
                (got - want).abs() <= 5e-7 * want.abs().max(1.0),
                "{column}: {got} != {want}"
            );
        }
        assert_eq!(rows[0].result.as_ref().unwrap().events, report.events);

        let failed = results_record(&rows[1], &plan.points[1], header.len());
        assert_eq!(failed.len(), header.len());
        assert_eq!(header[error_column(&plan.axes)], "error");
        assert!(failed[error_column(&plan.axes)].contains("vram_limit"));
    }

    #[test]
    fn figures_over_no_finished_tenant_are_empty_cells_and_failures_are_counted() {
        // A stock driver runs out of 20 MiB: both tenants fail; with 9 GiB both finish.
        let native = TWO_NN.replace("\"gpuswap\"", "\"native\"");
        let vary = ["device.vram_limit=20MiB,1GiB".to_owned()];
        let plan = Plan::new(Path::new("two-nn.toml"), &native, &vary, Some(1)).unwrap();
        let out = std::env::temp_dir().join(format!("gpuswap-output-{}", std::process::id()));
        let mut outputs = Outputs::create(&out, &plan).unwrap();
        let mut records = Vec::new();
        plan.execute(&[0, 1], Some(1), true, |p, rows| {
            records.push(outputs.records(p, &rows));
            Ok(())
        })
        .unwrap();
        let header = results_header(&plan);
        assert_eq!(header.last().unwrap(), "tenants_failed");
        let cell = |record: &[String], column: &str| {
            let i = header.iter().position(|h| h == column).unwrap();
            record[i].clone()
        };
        let (starved, ample) = (&records[0].results[0], &records[1].results[0]);
        for column in ["stp", "antt", "jain_slowdown", "jain_vram"] {
            assert_eq!(
                cell(starved, column),
                "",
                "{column} of a run where all failed"
            );
            assert_ne!(
                cell(ample, column),
                "",
                "{column} of a run where all finished"
            );
        }
        assert_eq!(cell(starved, "tenants_failed"), "2");
        assert_eq!(cell(ample, "tenants_failed"), "0");
        for point in &records {
            outputs.point(point).unwrap();
        }
        let summary = outputs.finish().unwrap();
        summary.write(&out, false).unwrap();
        let mut csv = csv::Reader::from_path(out.join("summary.csv")).unwrap();
        let head = csv.headers().unwrap().clone();
        let rows: Vec<csv::StringRecord> = csv.records().map(Result::unwrap).collect();
        let at = |row: usize, column: &str| {
            let i = head.iter().position(|h| h == column).unwrap();
            rows[row][i].to_owned()
        };
        assert_eq!(head.iter().next_back(), Some("tenants_failed"));
        assert_eq!(
            (at(0, "stp.mean"), at(0, "antt.max")),
            (String::new(), String::new())
        );
        assert_eq!(
            (at(0, "tenant_failed"), at(0, "tenants_failed")),
            ("1".into(), "2".into())
        );
        assert_eq!(at(1, "tenants_failed"), "0");
        assert!(at(1, "stp.mean").parse::<f64>().unwrap() > 0.0);
        std::fs::remove_dir_all(&out).unwrap();
    }
}
