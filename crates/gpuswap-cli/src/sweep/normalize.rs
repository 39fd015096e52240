//! `[sweep.normalize]`: the values of one axis compared against one of them, point by
//! point, as the adaptive paper's evaluation does (kernel time over the default
//! runtime's, per workload, geometric means per pattern class):
//!
//! ```toml
//! [sweep.normalize]
//! axis = "manager"                        # the compared axis
//! names = ["default", "tree", "adaptive"] # a name per value, for tables and figures
//! baseline = "default"                    # what the others are divided by
//! metric = "slowest_phase_ns"             # a summary metric (its mean over the runs)
//! optimum = ["default", "tree"]           # the offline optimum: the best of these per row
//! counts = ["far_faults", "pages_thrashed"]  # reported beside, not normalised
//! ```
//!
//! Writes normalized.csv (a row per combination of the other axes; when an app axis is
//! varied, a `geomean` row per pattern class and one for all) and normalized.svg.

use std::collections::BTreeMap;
use std::path::Path;

use toml::Value;

use super::axis::{Axis, value_text};
use super::error::SweepError;
use super::figures::Kind;
use super::records::write_csv;
use super::stats::PointStats;
use crate::plot;

/// A checked `[sweep.normalize]` table.
#[derive(Debug)]
pub struct Normalize {
    /// Index of the compared axis.
    axis: usize,
    names: Vec<String>,
    baseline: usize,
    metric: &'static str,
    /// Indices of the values the optimum chooses from.
    optimum: Vec<usize>,
    counts: Vec<&'static str>,
}

impl Normalize {
    /// Checks `table` against the sweep's axes and the metrics of `kind`; errors name
    /// the key and what was expected.
    pub fn parse(table: &Value, axes: &[Axis], kind: Kind) -> Result<Self, String> {
        let table = table
            .as_table()
            .ok_or("sweep.normalize: expected a table")?;
        for key in table.keys() {
            if !["axis", "names", "baseline", "metric", "optimum", "counts"].contains(&key.as_str())
            {
                return Err(format!(
                    "sweep.normalize.{key}: unknown key; expected axis, names, baseline, metric, optimum or counts"
                ));
            }
        }
        let text = |key: &str| -> Result<&str, String> {
            table
                .get(key)
                .and_then(Value::as_str)
                .ok_or(format!("sweep.normalize.{key}: expected a string"))
        };
        let list = |key: &str| -> Result<Vec<&str>, String> {
            match table.get(key) {
                None => Ok(Vec::new()),
                Some(Value::Array(items)) => items
                    .iter()
                    .map(|v| {
                        v.as_str()
                            .ok_or(format!("sweep.normalize.{key}: expected a list of strings"))
                    })
                    .collect(),
                Some(_) => Err(format!("sweep.normalize.{key}: expected a list of strings")),
            }
        };
        let axis_key = text("axis")?;
        let axis = axes.iter().position(|a| a.key == axis_key).ok_or_else(|| {
            format!(
                "sweep.normalize.axis: {axis_key:?} is not varied; expected one of {}",
                quoted(axes.iter().map(|a| &a.key))
            )
        })?;
        let names: Vec<String> = list("names")?.into_iter().map(str::to_owned).collect();
        let values = axes[axis].values.len();
        let names = if names.is_empty() {
            axes[axis].values.iter().map(value_text).collect()
        } else if names.len() == values {
            names
        } else {
            return Err(format!(
                "sweep.normalize.names: {} names for {values} values of {axis_key:?}; expected one per value",
                names.len()
            ));
        };
        let index = |key: &str, name: &str| {
            names.iter().position(|n| n == name).ok_or(format!(
                "sweep.normalize.{key}: {name:?} is not a name of the axis; expected one of {}",
                quoted(names.iter())
            ))
        };
        let baseline = index("baseline", text("baseline")?)?;
        let optimum = list("optimum")?
            .into_iter()
            .map(|n| index("optimum", n))
            .collect::<Result<_, _>>()?;
        let metric = |key: &str, name: &str| {
            kind.metrics().iter().copied().find(|m| *m == name).ok_or(format!(
                "sweep.normalize.{key}: {name:?} is not a summary metric of this sweep; expected one of {}",
                kind.metrics().join(", ")
            ))
        };
        Ok(Self {
            axis,
            baseline,
            metric: metric("metric", text("metric")?)?,
            optimum,
            counts: list("counts")?
                .into_iter()
                .map(|c| metric("counts", c))
                .collect::<Result<_, _>>()?,
            names,
        })
    }

    /// The compared axis and a name per value: what the plots call its values.
    pub(super) fn value_names(&self) -> (usize, &[String]) {
        (self.axis, &self.names)
    }

    /// Writes normalized.csv and normalized.svg (and .png) into `out`.
    pub(super) fn write(
        &self,
        out: &Path,
        axes: &[Axis],
        points: &[Vec<Value>],
        stats: &[PointStats],
        png: bool,
    ) -> Result<(), SweepError> {
        let app_axis = axes
            .iter()
            .position(|a| a.key == "tenant.app" || a.key == "tenant[0].app");
        let others: Vec<usize> = (0..axes.len()).filter(|i| *i != self.axis).collect();
        let rows = self.rows(axes, &others, points);
        let mean = |p: Option<usize>, metric: &str| -> Option<f64> {
            p.and_then(|p| stats[p].metrics.get(metric)).map(|s| s.mean)
        };
        let class_of = |key: &[String]| -> String {
            app_axis
                .and_then(|a| others.iter().position(|i| *i == a))
                .and_then(|at| gpuswap_sim::apps::find(&key[at]))
                .and_then(|app| app.pattern_class())
                .map_or(String::new(), |c| c.name().to_owned())
        };
        let mut header: Vec<String> = others.iter().map(|i| axes[*i].key.clone()).collect();
        header.push("class".into());
        header.extend(self.names.iter().cloned());
        header.push("optimum".into());
        for c in &self.counts {
            header.extend(self.names.iter().map(|n| format!("{n}.{c}")));
        }
        let mut table: Vec<Vec<String>> = Vec::new();
        // Ratios per row, for the geometric means and the figure.
        let mut ratios: Vec<RatioRow> = Vec::new();
        for (key, at) in &rows {
            let base = mean(at[self.baseline], self.metric).filter(|b| *b > 0.0);
            let mut r: Vec<Option<f64>> = at
                .iter()
                .map(|p| Some(mean(*p, self.metric)? / base?))
                .collect();
            let optimum = self.optimum.iter().filter_map(|i| r[*i]).reduce(f64::min);
            r.push(optimum);
            let class = class_of(key);
            let mut cells = key.clone();
            cells.push(class.clone());
            cells.extend(
                r.iter()
                    .map(|v| v.map_or(String::new(), |v| format!("{v:.4}"))),
            );
            for c in &self.counts {
                cells.extend(
                    at.iter()
                        .map(|p| mean(*p, c).map_or(String::new(), |v| format!("{v}"))),
                );
            }
            table.push(cells);
            ratios.push(RatioRow {
                key: key.clone(),
                class,
                ratios: r,
            });
        }
        if let Some(app) = app_axis.and_then(|a| others.iter().position(|i| *i == a)) {
            table.extend(geomean_rows(
                &ratios,
                app,
                self.names.len() + 1,
                header.len(),
            ));
        }
        write_csv(&out.join("normalized.csv"), &header, &table)?;
        self.figure(out, &ratios, png)
    }

    /// The rows of normalized.csv: the values of the `others` axes, in the order the
    /// grid gives them; per row, the index in `points` of each compared value's point.
    fn rows(
        &self,
        axes: &[Axis],
        others: &[usize],
        points: &[Vec<Value>],
    ) -> Vec<(Vec<String>, Vec<Option<usize>>)> {
        let mut rows: Vec<(Vec<String>, Vec<Option<usize>>)> = Vec::new();
        for (p, point) in points.iter().enumerate() {
            let key: Vec<String> = others.iter().map(|i| value_text(&point[*i])).collect();
            let Some(v) = axes[self.axis]
                .values
                .iter()
                .position(|v| *v == point[self.axis])
            else {
                continue;
            };
            let at = match rows.iter().position(|(k, _)| *k == key) {
                Some(at) => at,
                None => {
                    rows.push((key, vec![None; self.names.len()]));
                    rows.len() - 1
                }
            };
            rows[at].1[v] = Some(p);
        }
        rows
    }

    /// normalized.svg: a category per row, a series per compared value and the optimum.
    fn figure(&self, out: &Path, ratios: &[RatioRow], png: bool) -> Result<(), SweepError> {
        let categories: Vec<String> = ratios.iter().map(|r| r.key.join(" ")).collect();
        let mut labels = self.names.clone();
        // Without `optimum` its series would be an empty legend row.
        if !self.optimum.is_empty() {
            labels.push("optimum".into());
        }
        let slots = plot::color_slots(labels.iter().cloned());
        let lines: Vec<plot::Line> = labels
            .iter()
            .enumerate()
            .map(|(i, label)| plot::Line {
                label: label.clone(),
                color: slots[label],
                points: ratios
                    .iter()
                    .enumerate()
                    .map(|(x, row)| plot::LinePoint {
                        x: x as f64,
                        value: row.ratios[i].map(|v| plot::Spread {
                            mean: v,
                            min: v,
                            max: v,
                        }),
                        run_failed: false,
                        tenant_failed: false,
                    })
                    .collect(),
            })
            .collect();
        let baseline = &self.names[self.baseline];
        let mut subtitle = "Means over the runs".to_owned();
        if !self.optimum.is_empty() {
            let chosen: Vec<&str> = self
                .optimum
                .iter()
                .map(|i| self.names[*i].as_str())
                .collect();
            subtitle += &format!(
                "; optimum: the best of {} per point, chosen after the fact",
                chosen.join(", ")
            );
        }
        plot::save(
            &out.join("normalized"),
            // Room for each category's label under the x axis, within a bounded width
            // (labels stand upright where they would not fit).
            plot::chart_pixels(1, ((90 * categories.len() as u32).max(1000), 700)),
            png,
            &plot::LineChart {
                title: &format!("{} over {baseline}'s", self.metric),
                subtitle: &subtitle,
                x_label: "point",
                y_label: "normalised",
                y_unit: "x",
                panels: &[plot::Panel {
                    title: String::new(),
                    lines,
                }],
                x_axis: plot::XAxis::Categories(&categories),
            },
        )
        .map(|_| ())
        .map_err(SweepError::Output)
    }
}

/// `items` quoted and joined with commas, for the lists in errors.
fn quoted<T: std::fmt::Debug>(items: impl Iterator<Item = T>) -> String {
    items
        .map(|item| format!("{item:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// One row of normalized.csv: the other axes' values, the app's pattern class (empty
/// when none), the ratio of each compared value and then the optimum's.
struct RatioRow {
    key: Vec<String>,
    class: String,
    ratios: Vec<Option<f64>>,
}

/// Rows of geometric means of `ratios` (`series` columns) per pattern class and for all,
/// within each combination of the other axes than the app's (at `app` in the keys);
/// padded to `width` cells.
fn geomean_rows(ratios: &[RatioRow], app: usize, series: usize, width: usize) -> Vec<Vec<String>> {
    // (the other axes' values, class) -> the rows' ratios
    type Groups<'a> = BTreeMap<(Vec<String>, String), Vec<&'a [Option<f64>]>>;
    let mut groups = Groups::new();
    for row in ratios {
        let mut rest = row.key.clone();
        rest.remove(app);
        for class in [row.class.clone(), "all".into()] {
            groups
                .entry((rest.clone(), class))
                .or_default()
                .push(&row.ratios);
        }
    }
    groups
        .into_iter()
        .filter(|((_, class), _)| !class.is_empty())
        .map(|((mut key, class), rs)| {
            key.insert(app, "geomean".into());
            let mut cells = key;
            cells.push(class);
            cells.extend((0..series).map(|i| {
                let values: Vec<f64> = rs.iter().filter_map(|r| r[i]).collect();
                if values.len() < rs.len() || values.is_empty() {
                    return String::new();
                }
                let log: f64 = values.iter().map(|v| v.ln()).sum::<f64>() / values.len() as f64;
                format!("{:.4}", log.exp())
            }));
            cells.resize(width, String::new());
            cells
        })
        .collect()
}
