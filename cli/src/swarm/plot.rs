//! `--plot FILE.png`: the run's timeline drawn as a PNG, tasks finished per
//! second above and the decision latency's p50 and p99 per second below
//! (the `timeline` of the results). Drawn with plotters' bitmap backend;
//! its text in DejaVu Sans from the `dejavu` crate, rendered by plotters'
//! `ab_glyph` (no system font needed).

use std::sync::OnceLock;

use plotters::prelude::*;
use plotters::style::register_font;
use serde_json::Value as Json;

/// One second of the timeline: tasks finished, latency p50 and p99 (ms).
struct Second {
    t: f64,
    tasks: f64,
    p50: Option<f64>,
    p99: Option<f64>,
}

/// Makes DejaVu Sans plotters' `sans-serif`, once.
fn font() -> Result<(), String> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular())
            .map_err(|_| "the plot's font (DejaVu Sans) cannot be read".to_owned())
    })
    .clone()
}

/// `--plot`'s file name ends in `.png` (checked before the run).
pub fn check_name(path: &str) -> Result<(), String> {
    if !path.to_ascii_lowercase().ends_with(".png") {
        return Err(format!("--plot {path}: the file name must end in .png"));
    }
    Ok(())
}

/// Draws the results' timeline into `path` (which must end in `.png`).
pub fn write_png(path: &str, results: &Json) -> Result<(), String> {
    check_name(path)?;
    font()?;
    let seconds: Vec<Second> = results["timeline"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|s| Second {
            t: s["second"].as_f64().unwrap_or(0.0),
            tasks: s["tasks_finished"].as_f64().unwrap_or(0.0),
            p50: s["latency_ms_p50"].as_f64(),
            p99: s["latency_ms_p99"].as_f64(),
        })
        .collect();
    let workers = results["workers"].as_u64().unwrap_or(0);
    draw(path, &seconds, workers).map_err(|e| format!("--plot {path}: {e}"))
}

type Failed = Box<dyn std::error::Error>;

fn draw(path: &str, seconds: &[Second], workers: u64) -> Result<(), Failed> {
    let root = BitMapBackend::new(path, (1000, 720)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(
        &format!("framewire swarm: {workers} simulated workers"),
        ("sans-serif", 22),
    )?;
    let (top, bottom) = root.split_vertically(330);
    let end = seconds.last().map_or(1.0, |s| s.t + 1.0).max(1.0);

    let peak = seconds.iter().map(|s| s.tasks).fold(0.0, f64::max);
    let mut chart = ChartBuilder::on(&top)
        .caption("tasks finished per second", ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(64)
        .build_cartesian_2d(0.0..end, 0.0..(peak * 1.1).max(1.0))?;
    chart
        .configure_mesh()
        .x_desc("seconds since the start")
        .y_desc("tasks / s")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .label_style(("sans-serif", 13))
        .draw()?;
    chart.draw_series(LineSeries::new(
        seconds.iter().map(|s| (s.t, s.tasks)),
        BLUE.stroke_width(2),
    ))?;

    let latencies = || seconds.iter().flat_map(|s| [s.p50, s.p99]).flatten();
    let lo = latencies().fold(f64::INFINITY, f64::min);
    let hi = latencies().fold(0.0, f64::max);
    let (lo, hi) = if lo.is_finite() && lo > 0.0 {
        (lo / 1.5, hi * 1.5)
    } else {
        (0.01, 10.0)
    };
    let mut chart = ChartBuilder::on(&bottom)
        .caption(
            "the scheduler's decision latency, per second",
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(64)
        .build_cartesian_2d(0.0..end, (lo..hi).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("seconds since the start")
        .y_desc("ms (log scale)")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y}"))
        .label_style(("sans-serif", 13))
        .draw()?;
    for (name, color, pick) in [
        (
            "p50",
            GREEN.mix(0.9),
            (|s: &Second| s.p50) as fn(&Second) -> Option<f64>,
        ),
        ("p99", RED.mix(0.9), |s: &Second| s.p99),
    ] {
        let points: Vec<(f64, f64)> = seconds
            .iter()
            .filter_map(|s| pick(s).filter(|v| *v > 0.0).map(|v| (s.t, v)))
            .collect();
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))?
            .label(name)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2)));
        chart.draw_series(
            points
                .into_iter()
                .map(|p| Circle::new(p, 2, color.filled())),
        )?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_a_name_not_png() {
        let e = write_png("/tmp/x.jpg", &serde_json::json!({})).unwrap_err();
        assert!(e.contains("must end in .png"), "{e}");
        let e = write_png("/nonexistent/dir/x.png", &serde_json::json!({})).unwrap_err();
        assert!(e.starts_with("--plot /nonexistent/dir/x.png: "), "{e}");
    }

    /// A run in which nothing finished (no latency either) still draws.
    #[test]
    fn draws_an_empty_run() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("empty.png");
        let path = path.to_str().unwrap();
        let results = serde_json::json!({"workers": 3, "timeline": [
            {"second": 0, "tasks_finished": 0, "latency_ms_p50": null, "latency_ms_p99": null},
        ]});
        write_png(path, &results).unwrap();
        let bytes = std::fs::read(path).unwrap();
        assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n") && bytes.len() > 5_000);
        write_png(path, &serde_json::json!({"timeline": "not a list"})).unwrap();
    }
}
