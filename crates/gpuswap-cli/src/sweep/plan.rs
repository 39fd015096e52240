//! Planning a sweep: the `[sweep]` table and `--vary` flags read into axes, value
//! ranges expanded, and the grid of points they span.

use gpuswap_sim::engine::RunLimits;
use std::path::{Path, PathBuf};

use gpuswap_sim::units::{parse_bytes, parse_ns};
use toml::Value;

use super::axis::Axis;
use super::error::SweepError;
use super::figures::{Kind, positional};
use super::keys::{check_path, overlaps, typed};
use super::normalize::Normalize;
use crate::scenario;

/// A sweep ready to run: the scenario without its `[sweep]` table, the axes, the grid.
pub struct Plan {
    pub(super) path: PathBuf,
    pub(super) table: toml::Table,
    pub(super) axes: Vec<Axis>,
    /// Runs (seeds) per grid point.
    pub runs: u32,
    /// The grid points.
    pub points: Vec<Vec<Value>>,
    /// The scenario as given, for names and defaults.
    pub base: Base,
    /// The bounds of every run.
    pub limits: RunLimits,
    /// `[sweep.normalize]`, checked.
    pub(super) normalize: Option<Normalize>,
}

impl Plan {
    /// How many values each axis has, in the grid's order (see [`grid`]).
    pub fn axis_sizes(&self) -> Vec<usize> {
        self.axes.iter().map(|a| a.values.len()).collect()
    }

    /// Reads a scenario text with its `[sweep]` table and `--vary` flags; `path` names it
    /// in errors and resolves relative files.
    pub fn new(
        path: &Path,
        text: &str,
        vary: &[String],
        runs: Option<u32>,
    ) -> Result<Self, SweepError> {
        let bad = |m: String| SweepError::BadInput(format!("{}: {m}", path.display()));
        let mut table: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| bad(crate::text::toml_error(&e)))?;
        let sweep = table.remove("sweep");
        let (mut axes, file_runs, normalize) = sweep_table(sweep.as_ref(), &table).map_err(&bad)?;
        // A flag replaces the `[sweep]` table's axis for its key; two flags for one key
        // would silently keep the last.
        let mut flagged: Vec<String> = Vec::new();
        for flag in vary {
            let axis = parse_vary_flag(flag, &table)
                .map_err(|m| SweepError::BadInput(format!("--vary {flag:?}: {m}")))?;
            if flagged.contains(&axis.key) {
                return Err(SweepError::BadInput(format!(
                    "--vary {flag:?}: {} is varied by an earlier --vary too; give its values in one flag",
                    axis.key
                )));
            }
            flagged.push(axis.key.clone());
            axes.retain(|a| a.key != axis.key);
            axes.push(axis);
        }
        // Two axes that set the same key would silently override each other.
        for (i, a) in axes.iter().enumerate() {
            for b in &axes[i + 1..] {
                if overlaps(&a.key, &b.key) {
                    return Err(SweepError::BadInput(format!(
                        "{}: the varied keys {:?} and {:?} set the same setting; vary one of them",
                        path.display(),
                        a.key,
                        b.key
                    )));
                }
            }
        }
        let runs = runs.or(file_runs).unwrap_or(1);
        if runs == 0 {
            return Err(SweepError::BadInput("--runs: expected at least 1".into()));
        }
        // The base scenario must be valid on its own: catches mistakes before any run.
        let base_text = text_without_sweep(&table);
        let base = if crate::vgpu_scenario::is_vgpu(&table) {
            crate::vgpu_scenario::parse(path, &base_text).map(Base::Vms)
        } else {
            scenario::parse(path, &base_text).map(|s| Base::Tenants(Box::new(s)))
        }
        .map_err(|e| SweepError::BadInput(e.to_string()))?;
        // Counted before any point is built: three axes of a thousand values would
        // take more memory than the machine has.
        let sizes: Vec<usize> = axes.iter().map(|a| a.values.len()).collect();
        let count = sizes.iter().try_fold(1usize, |n, k| n.checked_mul(*k));
        if count.is_none_or(|n| n > MAX_POINTS) {
            let factors: Vec<String> = sizes.iter().map(usize::to_string).collect();
            return Err(SweepError::BadInput(format!(
                "{}: the grid has {} points ({}); expected at most {MAX_POINTS}: vary fewer values, or split the sweep into several",
                path.display(),
                count.map_or("more than 2^64".to_owned(), |n| n.to_string()),
                factors.join(" x ")
            )));
        }
        let points = grid(&axes);
        let mut plan = Self {
            path: path.to_owned(),
            table,
            axes,
            runs,
            points,
            base,
            limits: RunLimits::default(),
            normalize: None,
        };
        if let Some(table) = normalize {
            plan.normalize = Some(Normalize::parse(&table, &plan.axes, plan.kind()).map_err(&bad)?);
        }
        Ok(plan)
    }

    /// The values a key takes, if it is varied.
    pub fn values(&self, key: &str) -> Option<&[Value]> {
        self.axes
            .iter()
            .find(|a| a.key == key)
            .map(|a| a.values.as_slice())
    }

    /// The tenants' apps for the plots' titles, in tenant order: each app once, with the
    /// number of tenants running it ("2 × nn + bfs"); a tenant whose app an axis varies
    /// counts as "varied app", its values being on the x axis or in the legend.
    pub fn apps(&self) -> String {
        let mut apps: Vec<(&str, usize)> = Vec::new();
        let programs: Vec<(String, &str, &str)> = match &self.base {
            Base::Tenants(s) => s
                .config
                .tenants
                .iter()
                .enumerate()
                .map(|(i, t)| (format!("tenant[{i}].app"), t.app.as_str(), "varied app"))
                .collect(),
            // VMs of one [[vm]] table share its workload (count expands it).
            Base::Vms(s) => s
                .config
                .vms
                .iter()
                .map(|v| ("vm.workload".to_owned(), v.workload.name, "varied workload"))
                .collect(),
        };
        for (key, program, varied) in &programs {
            let app = if self.axes.iter().any(|a| overlaps(&a.key, key)) {
                varied
            } else {
                program
            };
            match apps.iter_mut().find(|(a, _)| *a == *app) {
                Some((_, n)) => *n += 1,
                None => apps.push((app, 1)),
            }
        }
        apps.iter()
            .map(|(app, n)| match n {
                1 => (*app).to_owned(),
                n => format!("{n} × {app}"),
            })
            .collect::<Vec<_>>()
            .join(" + ")
    }

    /// The tenants of results.csv: the base scenario's tenant names, or, when the whole
    /// tenant list is varied (the names differ from point to point), `tenant[i]` for
    /// every position some point has.
    pub fn tenants(&self) -> Vec<String> {
        let varied = self.axes.iter().find(|a| a.key == "tenant");
        match &self.base {
            Base::Tenants(s) => match varied {
                Some(axis) => {
                    let most = axis
                        .values
                        .iter()
                        .filter_map(|v| v.as_array().map(Vec::len))
                        .chain([s.config.tenants.len()])
                        .max()
                        .unwrap_or(0);
                    (0..most).map(positional).collect()
                }
                None => s.config.tenants.iter().map(|t| t.name.clone()).collect(),
            },
            // A VM sweep's results.csv has system columns only.
            Base::Vms(_) => Vec::new(),
        }
    }

    /// What the scenario runs, which decides its metrics.
    pub fn kind(&self) -> Kind {
        match &self.base {
            Base::Tenants(s) if s.config.manager.policy.needs().page_faults => Kind::PagedTenants,
            Base::Tenants(_) => Kind::Tenants,
            Base::Vms(_) => Kind::Vms,
        }
    }

    /// The files the sweep's scenarios read (traces, fault logs, priorities), as they
    /// are opened: named relative to the scenario's folder, `{app}` in a priorities
    /// file's name taken as every app the sweep names. Sorted, each once.
    pub fn files_read(&self) -> Vec<PathBuf> {
        let mut names = Vec::new();
        let mut apps = Vec::new();
        for (key, value) in &self.table {
            collect_files(key, value, &mut names, &mut apps);
        }
        for axis in &self.axes {
            for part in axis.key.split('+') {
                let key = part.rsplit('.').next().unwrap_or(part);
                for value in &axis.values {
                    collect_files(key, value, &mut names, &mut apps);
                }
            }
        }
        let dir = self.path.parent().unwrap_or(Path::new("."));
        let mut files: Vec<PathBuf> = names
            .iter()
            .flat_map(|name| {
                if name.contains("{app}") {
                    apps.iter().map(|app| name.replace("{app}", app)).collect()
                } else {
                    vec![name.clone()]
                }
            })
            .map(|name| dir.join(name))
            .collect();
        files.sort();
        files.dedup();
        files
    }

    /// The scenario's name (its file name without extension).
    pub fn name(&self) -> &str {
        match &self.base {
            Base::Tenants(s) => &s.name,
            Base::Vms(s) => &s.name,
        }
    }
}

/// A sweep's base scenario: tenants on a discrete GPU, or VMs on a virtualised one.
#[derive(Clone, Debug)]
pub enum Base {
    /// `[[tenant]]` tables.
    Tenants(Box<scenario::Scenario>),
    /// `[[vm]]` tables.
    Vms(crate::vgpu_scenario::VgpuScenario),
}

/// The keys whose value names a file a scenario reads.
const FILE_KEYS: [&str; 3] = ["trace", "fault_log", "priorities_file"];

/// Gathers, from `value` found under `key` (and the tables and lists inside it), the
/// names of files read and the apps named.
fn collect_files(key: &str, value: &Value, names: &mut Vec<String>, apps: &mut Vec<String>) {
    match value {
        Value::String(s) if FILE_KEYS.contains(&key) => names.push(s.clone()),
        Value::String(s) if key == "app" => apps.push(s.clone()),
        Value::Table(t) => {
            for (k, v) in t {
                collect_files(k, v, names, apps);
            }
        }
        Value::Array(items) => {
            for v in items {
                collect_files(key, v, names, apps);
            }
        }
        _ => {}
    }
}

pub(super) fn text_without_sweep(table: &toml::Table) -> String {
    toml::to_string(table).expect("tables serialize")
}

/// What `[sweep]` says: the axes, the runs and the unchecked `normalize` table.
type SweepTable = (Vec<Axis>, Option<u32>, Option<Value>);

/// Reads `[sweep]`: `runs`, `vary` and `normalize` (checked once the axes are known).
fn sweep_table(sweep: Option<&Value>, scenario: &toml::Table) -> Result<SweepTable, String> {
    let Some(sweep) = sweep else {
        return Ok((Vec::new(), None, None));
    };
    let mut normalize = None;
    let table = sweep.as_table().ok_or("sweep: expected a table")?;
    let mut runs = None;
    let mut axes = Vec::new();
    for (key, value) in table {
        match key.as_str() {
            "runs" => {
                let n = value
                    .as_integer()
                    .filter(|n| *n >= 1 && *n <= i64::from(u32::MAX));
                runs = Some(n.ok_or("sweep.runs: expected a whole number of at least 1")? as u32);
            }
            "vary" => {
                let vary = value
                    .as_table()
                    .ok_or("sweep.vary: expected a table of key = values")?;
                for (path, values) in vary {
                    let values = match values {
                        Value::Array(items) if !items.is_empty() => items.clone(),
                        Value::String(text) if text.contains("..") => expand_range(text)
                            .map_err(|m| format!("sweep.vary.{path:?}: {m}"))?
                            .into_iter()
                            .map(|v| typed(v, path, scenario))
                            .collect::<Result<_, _>>()
                            .map_err(|m| format!("sweep.vary.{path:?}: {m}"))?,
                        _ => {
                            return Err(format!(
                                "sweep.vary.{path:?}: expected a list of values or a range \"FROM..TO step STEP\""
                            ));
                        }
                    };
                    check_path(path, scenario).map_err(|m| format!("sweep.vary.{path:?}: {m}"))?;
                    axes.push(Axis {
                        key: path.clone(),
                        values,
                    });
                }
            }
            "normalize" => normalize = Some(value.clone()),
            other => {
                return Err(format!(
                    "sweep.{other}: unknown key; expected runs, vary or normalize"
                ));
            }
        }
    }
    Ok((axes, runs, normalize))
}

/// Reads `KEY=V1,V2` or `KEY=FROM..TO step STEP`; a value may be written as TOML
/// (`manager={ mode = "gpuswap", chunk_policy = "random" },{ mode = "gdev" }`).
pub fn parse_vary_flag(flag: &str, scenario: &toml::Table) -> Result<Axis, String> {
    let (key, values) = flag
        .split_once('=')
        .ok_or("expected KEY=V1,V2,... or KEY=FROM..TO step STEP")?;
    let key = key.trim();
    check_path(key, scenario)?;
    let texts = if values.contains("..") && !values.trim_start().starts_with(['{', '[', '"', '\''])
    {
        expand_range(values)?
    } else {
        split_values(values)?
    };
    if texts.is_empty() {
        return Err("expected at least one value".into());
    }
    Ok(Axis {
        key: key.to_owned(),
        values: texts
            .into_iter()
            .map(|t| typed(t, key, scenario))
            .collect::<Result<_, _>>()?,
    })
}

/// Splits `V1,V2,...` at the commas outside braces, brackets and quotes, so that a
/// whole table (`{ mode = "gpuswap", chunk_policy = "random" }`) stays one value.
fn split_values(text: &str) -> Result<Vec<String>, String> {
    let mut values = Vec::new();
    let mut current = String::new();
    let mut depth = 0usize;
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for c in text.chars() {
        match quote {
            Some(q) => {
                // Basic strings ("...") take backslash escapes; literal ones ('...') do not.
                if escaped {
                    escaped = false;
                } else if c == '\\' && q == '"' {
                    escaped = true;
                } else if c == q {
                    quote = None;
                }
            }
            None => match c {
                '"' | '\'' => quote = Some(c),
                '{' | '[' => depth += 1,
                '}' | ']' => {
                    depth = depth.checked_sub(1).ok_or_else(|| {
                        format!("{text}: a closing {c:?} without its opening one")
                    })?;
                }
                ',' if depth == 0 => {
                    values.push(std::mem::take(&mut current));
                    continue;
                }
                _ => {}
            },
        }
        current.push(c);
    }
    if let Some(q) = quote {
        return Err(format!("{text}: a {q} quote is not closed"));
    }
    if depth > 0 {
        return Err(format!("{text}: a brace or bracket is not closed"));
    }
    values.push(current);
    Ok(values
        .into_iter()
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
        .collect())
}

/// Expands `FROM..TO step STEP` (inclusive when TO is on the grid) for sizes, durations or
/// whole numbers; values are written in the largest unit (of FROM's kind: binary or
/// decimal sizes, durations) that divides them all.
pub fn expand_range(text: &str) -> Result<Vec<String>, String> {
    let expected = "expected FROM..TO step STEP, e.g. \"20MiB..500MiB step 20MiB\", \"1s..5s step 1s\" or \"1..10 step 1\"";
    let (range, step) = text.split_once(" step ").ok_or(expected)?;
    let (from, to) = range.split_once("..").ok_or(expected)?;
    let (from, to, step) = (from.trim(), to.trim(), step.trim());
    // Each family: a parser and its units, largest first; decimal sizes are a family of
    // their own so that "100MB.." stays in MB.
    type Parser = fn(&str) -> Option<u64>;
    const BINARY: &[(&str, u64)] = &[
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
        ("B", 1),
    ];
    const DECIMAL: &[(&str, u64)] = &[
        ("GB", 1_000_000_000),
        ("MB", 1_000_000),
        ("KB", 1_000),
        ("B", 1),
    ];
    const TIME: &[(&str, u64)] = &[
        ("s", 1_000_000_000),
        ("ms", 1_000_000),
        ("us", 1_000),
        ("ns", 1),
    ];
    let decimal = ["KB", "MB", "GB"].iter().any(|u| from.ends_with(u));
    let families: [(Parser, &[(&str, u64)]); 3] = [
        (
            |t| parse_bytes(t).ok(),
            if decimal { DECIMAL } else { BINARY },
        ),
        (|t| parse_ns(t).ok(), TIME),
        (|t| t.parse::<u64>().ok(), &[("", 1)]),
    ];
    for (parse, units) in families {
        let (Some(a), Some(b), Some(s)) = (parse(from), parse(to), parse(step)) else {
            continue;
        };
        if s == 0 {
            return Err("the step must be positive".into());
        }
        if b < a {
            return Err(format!("{to} is below {from}"));
        }
        let count = (b - a) / s + 1;
        if count > 100_000 {
            return Err(format!("{count} values; expected at most 100000"));
        }
        // The largest unit of the family that divides every value.
        let (name, scale) = units
            .iter()
            .find(|(_, scale)| (0..count).all(|i| (a + i * s) % scale == 0))
            .copied()
            .unwrap_or(units[units.len() - 1]);
        return Ok((0..count)
            .map(|i| format!("{}{name}", (a + i * s) / scale))
            .collect());
    }
    Err(expected.into())
}

/// The most grid points a sweep takes (each is a run per seed; a million already takes
/// hours).
pub const MAX_POINTS: usize = 1_000_000;

/// Every combination of the axes' values, first axis slowest.
pub fn grid(axes: &[Axis]) -> Vec<Vec<Value>> {
    axes.iter().fold(vec![Vec::new()], |points, axis| {
        points
            .iter()
            .flat_map(|p| {
                axis.values.iter().map(move |v| {
                    let mut next = p.clone();
                    next.push(v.clone());
                    next
                })
            })
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(text: &str) -> toml::Table {
        text.parse().unwrap()
    }

    #[test]
    fn ranges_expand_inclusively_in_the_unit_of_from() {
        assert_eq!(
            expand_range("20MiB..100MiB step 20MiB").unwrap(),
            ["20MiB", "40MiB", "60MiB", "80MiB", "100MiB"]
        );
        assert_eq!(
            expand_range("128KiB..1MiB step 384KiB").unwrap(),
            ["128KiB", "512KiB", "896KiB"]
        );
        assert_eq!(expand_range("1s..3s step 1s").unwrap(), ["1s", "2s", "3s"]);
        assert_eq!(expand_range("1..10 step 4").unwrap(), ["1", "5", "9"]);
        assert_eq!(expand_range("1GiB..1GiB step 1MiB").unwrap(), ["1GiB"]);
        // Mixed units: written in the largest unit that divides every value.
        assert_eq!(
            expand_range("1GiB..1536MiB step 512MiB").unwrap(),
            ["1024MiB", "1536MiB"]
        );
    }

    #[test]
    fn bad_ranges_say_what_is_expected() {
        for bad in [
            "20MiB..10MiB step 1MiB",
            "1..5 step 0",
            "1..5",
            "a..b step c",
            "0..10000000 step 1",
        ] {
            let e = expand_range(bad).unwrap_err();
            assert!(!e.is_empty(), "{bad}");
        }
        assert!(
            expand_range("1..5")
                .unwrap_err()
                .contains("FROM..TO step STEP")
        );
        assert!(
            expand_range("20MiB..10MiB step 1MiB")
                .unwrap_err()
                .contains("below")
        );
    }

    #[test]
    fn vary_flags_take_the_scenario_types() {
        let s = table(
            "seed = 1\n[device]\nvram_limit = \"1GiB\"\n[[tenant]]\napp = \"nn\"\nrepeat = 3\n",
        );
        let a = parse_vary_flag("tenant.repeat=1,2", &s).unwrap();
        assert_eq!(a.values, [Value::Integer(1), Value::Integer(2)]);
        let a = parse_vary_flag("device.vram_limit=20MiB..60MiB step 20MiB", &s).unwrap();
        assert_eq!(
            a.values,
            ["20MiB", "40MiB", "60MiB"].map(|v| Value::String(v.into()))
        );
        let a = parse_vary_flag("device.oversubscription=1,1.25", &s).unwrap();
        assert_eq!(a.values, [Value::Float(1.0), Value::Float(1.25)]);
        let a = parse_vary_flag("tenant[0].size=4096", &s).unwrap();
        assert_eq!(a.values, [Value::String("4096".into())]);
        assert!(
            parse_vary_flag("tenant[3].repeat=1", &s)
                .unwrap_err()
                .contains("1 tenants")
        );
        assert!(
            parse_vary_flag("colour=red", &s)
                .unwrap_err()
                .contains("expected a scenario key")
        );
        assert!(parse_vary_flag("seed", &s).is_err());
    }

    #[test]
    fn whole_tables_and_quoted_values_keep_their_commas() {
        let s = table("[manager]\nmode = \"gpuswap\"\n[[tenant]]\napp = \"nn\"\n");
        let a = parse_vary_flag(
            r#"manager={ mode = "gpuswap", chunk_policy = "random" }, {mode="native"},{ mode = "gdev" }"#,
            &s,
        )
        .unwrap();
        assert_eq!(a.values.len(), 3, "{:?}", a.values);
        assert_eq!(a.values[0]["chunk_policy"].as_str(), Some("random"));
        assert_eq!(a.values[1]["mode"].as_str(), Some("native"));
        let a = parse_vary_flag(r#"tenant[0].name="a,b",'c\d',e"#, &s).unwrap();
        assert_eq!(
            a.values,
            ["a,b", "c\\d", "e"].map(|v| Value::String(v.into()))
        );
        // Brackets keep a list whole; a range inside a string is no range.
        let a = parse_vary_flag(r#"tenant[0].name=["x", "y"],"1..2 step 1""#, &s).unwrap();
        assert_eq!(a.values.len(), 2);
        for (bad, says) in [
            ("manager={ mode = \"gdev\"", "not closed"),
            ("manager={ mode = gdev }", "expected a TOML value"),
            ("manager=mode}", "without its opening"),
            ("tenant[0].name=\"a,b", "quote is not closed"),
        ] {
            let e = parse_vary_flag(bad, &s).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn apps_name_each_app_once_and_the_varied_ones_as_such() {
        let text = "seed = 1\n[device]\npreset = \"gtx480\"\n\
            [[tenant]]\nname = \"a\"\napp = \"nn\"\n\
            [[tenant]]\nname = \"b\"\napp = \"bfs\"\n\
            [[tenant]]\nname = \"c\"\napp = \"nn\"\n";
        let apps = |vary: &[&str]| {
            let vary: Vec<String> = vary.iter().map(|v| (*v).to_owned()).collect();
            Plan::new(Path::new("three.toml"), text, &vary, None)
                .unwrap()
                .apps()
        };
        assert_eq!(apps(&[]), "2 × nn + bfs");
        assert_eq!(apps(&["device.vram_limit=1GiB"]), "2 × nn + bfs");
        assert_eq!(apps(&["tenant[1].app=lud,hotspot"]), "2 × nn + varied app");
        assert_eq!(
            apps(&["tenant[0].app+tenant[2].app=lud"]),
            "2 × varied app + bfs"
        );
        assert_eq!(apps(&["tenant.app=lud"]), "3 × varied app");
    }

    #[test]
    fn the_files_read_are_found_in_the_scenario_and_the_varied_values() {
        let dir = std::env::temp_dir().join(format!("gpuswap-files-read-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("p")).unwrap();
        for f in ["p/nn.toml", "p/bfs.toml", "p/lud.toml"] {
            std::fs::write(dir.join(f), "").unwrap();
        }
        let text = "[device]\npreset = \"gtx480\"\n[manager]\nmode = \"gpuswap\"\nchunk_policy = \"priority-buffer\"\n\
            [[tenant]]\napp = \"nn\"\npriorities_file = \"p/{app}.toml\"\n\
            [[tenant]]\napp = \"bfs\"\npriorities_file = \"p/{app}.toml\"\n";
        let path = dir.join("s.toml");
        let vary = ["tenant[0].app=nn,lud".to_owned()];
        let plan = Plan::new(&path, text, &vary, None).unwrap();
        let names: Vec<String> = plan
            .files_read()
            .iter()
            .map(|f| f.strip_prefix(&dir).unwrap().display().to_string())
            .collect();
        assert_eq!(names, ["p/bfs.toml", "p/lud.toml", "p/nn.toml"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn grid_is_the_cartesian_product() {
        let axes = [
            Axis {
                key: "a".into(),
                values: vec![Value::Integer(1), Value::Integer(2)],
            },
            Axis {
                key: "b".into(),
                values: ["x", "y", "z"].map(|v| Value::String(v.into())).into(),
            },
        ];
        let g = grid(&axes);
        assert_eq!(g.len(), 6);
        assert_eq!(g[0], [Value::Integer(1), Value::String("x".into())]);
        assert_eq!(g[5], [Value::Integer(2), Value::String("z".into())]);
        assert_eq!(grid(&[]), vec![Vec::<Value>::new()]);
    }
}
