//! `fencelog bench --report FILE.html`: the run as pictures, in one self-contained HTML file
//! (inline SVG and CSS, no script, nothing fetched), so it can be attached to an issue, kept as
//! a CI artifact or opened from a sweep's table years later.
//!
//! What it shows, per role: throughput over time, latency percentiles (p50, p99, max) over
//! time, the latency histogram of the whole window, the CPU of the server and of the bench over
//! time; and the run's parameters and the same summary table the terminal shows.
//!
//! Depends on the figures ([`super::stats`], [`super::timeline`], [`super::cpu`]) and the
//! settings ([`super::config`]) only.

use std::fmt::Write as _;

use super::config::BenchConfig;
use super::stats::{self, RoleReport};

/// Width and height of every plot, in SVG user units (pixels at 100% zoom).
const WIDTH: f64 = 760.0;
const HEIGHT: f64 = 280.0;
/// The plot area's margins: room for tick labels and axis titles.
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 30.0;
const BOTTOM: f64 = 45.0;

/// Line colours, one per series (colour-blind safe, Okabe–Ito).
const COLOURS: [&str; 6] = [
    "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9",
];

/// One line of a plot.
struct Series {
    name: String,
    points: Vec<(f64, f64)>,
    /// Its colour: one per role.
    colour: usize,
    /// Its stroke pattern (SVG `stroke-dasharray`), for several lines of one role.
    dash: Option<&'static str>,
}

/// How an axis maps values: linearly from 0, or by powers of ten.
#[derive(Clone, Copy, PartialEq)]
enum Scale {
    Linear,
    Log,
}

/// A plot's title and axes.
struct Plot<'a> {
    title: &'a str,
    x_label: &'a str,
    y_label: &'a str,
    x_scale: Scale,
    y_scale: Scale,
}

/// The report of a finished run as an HTML document.
pub fn html(config: &BenchConfig, reports: &[RoleReport]) -> String {
    let mut out = String::new();
    let title = format!(
        "fencelog bench: {} over the {} listener",
        config.mode.name(),
        config.protocol.name()
    );
    let _ = write!(
        out,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title>\
         <style>body{{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:{}px}}\
         pre{{background:#f6f6f6;padding:1em;overflow-x:auto}}table{{border-collapse:collapse}}\
         td,th{{border:1px solid #ccc;padding:.2em .6em;text-align:left}}\
         svg{{display:block;margin:1em 0}}</style></head><body>\n<h1>{}</h1>\n",
        escape(&title),
        WIDTH as u32 + 40,
        escape(&title)
    );
    out.push_str("<h2>Summary</h2>\n<pre>");
    out.push_str(&escape(&stats::table(config, reports)));
    out.push_str("</pre>\n");
    parameters(&mut out, config);
    let plotted: Vec<&RoleReport> = reports.iter().filter(|r| r.plots.is_some()).collect();
    if plotted.is_empty() {
        out.push_str("<p>No figures over time were kept for this run.</p>\n");
    } else {
        throughput(&mut out, &plotted);
        latency_over_time(&mut out, &plotted);
        histogram(&mut out, &plotted);
        cpu(&mut out, &plotted);
    }
    out.push_str("</body></html>\n");
    out
}

fn parameters(out: &mut String, config: &BenchConfig) {
    let rows: [(&str, String); 12] = [
        ("mode", config.mode.name().to_string()),
        ("protocol", config.protocol.name().to_string()),
        ("producers", config.producers.to_string()),
        ("consumers", config.consumers.to_string()),
        ("partitions", config.topic_partitions().to_string()),
        ("record size (bytes)", config.record_bytes.to_string()),
        ("records per batch", config.batch_records.to_string()),
        ("requests in flight", config.in_flight.to_string()),
        ("flush", config.flush.to_string()),
        (
            "rate (records/s)",
            config.rate.map_or("max".into(), |r| r.to_string()),
        ),
        (
            "warm-up",
            humantime::format_duration(config.warmup).to_string(),
        ),
        (
            "server",
            config
                .addr
                .clone()
                .unwrap_or_else(|| "in-process, temporary directory".into()),
        ),
    ];
    out.push_str("<h2>Parameters</h2>\n<table>\n");
    for (name, value) in rows {
        let _ = writeln!(
            out,
            "<tr><th>{}</th><td>{}</td></tr>",
            escape(name),
            escape(&value)
        );
    }
    out.push_str("</table>\n");
}

fn seconds_of(report: &RoleReport, index: usize) -> f64 {
    let plots = report.plots.as_ref().expect("filtered on plots");
    plots.timeline.interval().as_secs_f64() * (index as f64 + 1.0)
}

fn throughput(out: &mut String, reports: &[&RoleReport]) {
    let series = reports
        .iter()
        .enumerate()
        .map(|(colour, report)| {
            let plots = report.plots.as_ref().expect("filtered on plots");
            let interval = plots.timeline.interval().as_secs_f64();
            Series {
                name: report.role.to_string(),
                colour,
                dash: None,
                points: plots
                    .timeline
                    .buckets()
                    .iter()
                    .enumerate()
                    .map(|(i, b)| (seconds_of(report, i), b.bytes as f64 / interval / 1e6))
                    .collect(),
            }
        })
        .collect::<Vec<_>>();
    out.push_str("<h2>Throughput over time</h2>\n");
    svg(
        out,
        &Plot {
            title: "MB/s of values, per interval",
            x_label: "seconds after the warm-up",
            y_label: "MB/s",
            x_scale: Scale::Linear,
            y_scale: Scale::Linear,
        },
        &series,
    );
}

fn latency_over_time(out: &mut String, reports: &[&RoleReport]) {
    let mut series = Vec::new();
    for (colour, report) in reports.iter().enumerate() {
        let plots = report.plots.as_ref().expect("filtered on plots");
        let percentile =
            |name: &str,
             dash: Option<&'static str>,
             pick: &dyn Fn(&hdrhistogram::Histogram<u64>) -> u64| Series {
                name: format!("{} {name}", report.role),
                colour,
                dash,
                points: plots
                    .timeline
                    .buckets()
                    .iter()
                    .enumerate()
                    .filter(|(_, b)| !b.latency_us.is_empty())
                    .map(|(i, b)| (seconds_of(report, i), pick(&b.latency_us) as f64))
                    .collect(),
            };
        series.push(percentile("p50", None, &|h| h.value_at_quantile(0.5)));
        series.push(percentile("p99", Some("6 3"), &|h| {
            h.value_at_quantile(0.99)
        }));
        series.push(percentile("max", Some("1 3"), &|h| h.max()));
    }
    out.push_str("<h2>Latency over time</h2>\n");
    svg(
        out,
        &Plot {
            title: "latency percentiles per interval (log scale)",
            x_label: "seconds after the warm-up",
            y_label: "µs",
            x_scale: Scale::Linear,
            y_scale: Scale::Log,
        },
        &series,
    );
}

fn histogram(out: &mut String, reports: &[&RoleReport]) {
    let series = reports
        .iter()
        .enumerate()
        .map(|(colour, report)| {
            let histogram = &report.plots.as_ref().expect("filtered on plots").latency_us;
            let total = histogram.len().max(1) as f64;
            // Four buckets per doubling: fine enough to show modes, coarse enough to read.
            let points = histogram
                .iter_log(1, 2f64.powf(0.25))
                .filter(|step| step.count_since_last_iteration() > 0)
                .map(|step| {
                    (
                        step.value_iterated_to().max(1) as f64,
                        100.0 * step.count_since_last_iteration() as f64 / total,
                    )
                })
                .collect();
            Series {
                name: report.role.to_string(),
                points,
                colour,
                dash: None,
            }
        })
        .collect::<Vec<_>>();
    out.push_str("<h2>Latency histogram</h2>\n");
    svg(
        out,
        &Plot {
            title: "share of records by latency, whole window (log scale, 4 buckets per doubling)",
            x_label: "latency, µs",
            y_label: "% of records",
            x_scale: Scale::Log,
            y_scale: Scale::Linear,
        },
        &series,
    );
}

fn cpu(out: &mut String, reports: &[&RoleReport]) {
    // Every role of a run shares one CPU window: draw the first that has points.
    let Some(points) = reports
        .iter()
        .filter_map(|r| r.plots.as_ref())
        .map(|plots| &plots.cpu)
        .find(|points| !points.is_empty())
    else {
        out.push_str("<h2>CPU over time</h2>\n<p>Not sampled: loopback runs measure no server, and elsewhere <code>/proc</code> could not be read.</p>\n");
        return;
    };
    let mut series = vec![Series {
        name: "bench".into(),
        points: points.iter().map(|p| (p.seconds, p.client_cores)).collect(),
        colour: 1,
        dash: None,
    }];
    if points.iter().any(|p| p.server_cores.is_some()) {
        series.insert(
            0,
            Series {
                name: "server".into(),
                points: points
                    .iter()
                    .filter_map(|p| Some((p.seconds, p.server_cores?)))
                    .collect(),
                colour: 0,
                dash: None,
            },
        );
    }
    out.push_str("<h2>CPU over time</h2>\n");
    svg(
        out,
        &Plot {
            title: "cores busy (CPU seconds per second), per interval",
            x_label: "seconds after the warm-up",
            y_label: "cores",
            x_scale: Scale::Linear,
            y_scale: Scale::Linear,
        },
        &series,
    );
}

/// An axis: its value range and how values map onto it.
struct Axis {
    scale: Scale,
    low: f64,
    high: f64,
}

impl Axis {
    fn fit(scale: Scale, values: impl Iterator<Item = f64>) -> Self {
        let (mut low, mut high) = (f64::INFINITY, f64::NEG_INFINITY);
        for value in values.filter(|v| v.is_finite() && (scale == Scale::Linear || *v > 0.0)) {
            low = low.min(value);
            high = high.max(value);
        }
        if !low.is_finite() {
            (low, high) = (1.0, 10.0);
        }
        match scale {
            Scale::Linear => {
                let high = high.max(low).max(1e-9);
                let step = nice_ceiling(high / 5.0);
                Self {
                    scale,
                    low: 0.0_f64.min(low),
                    high: (high / step).ceil() * step,
                }
            }
            Scale::Log => Self {
                scale,
                low: 10f64.powf(low.log10().floor()),
                high: 10f64.powf(high.log10().ceil().max(low.log10().floor() + 1.0)),
            },
        }
    }

    /// Where `value` falls, from 0 (low) to 1 (high).
    fn fraction(&self, value: f64) -> f64 {
        match self.scale {
            Scale::Linear => (value - self.low) / (self.high - self.low),
            Scale::Log => {
                (value.max(self.low).log10() - self.low.log10())
                    / (self.high.log10() - self.low.log10())
            }
        }
    }

    fn ticks(&self) -> Vec<f64> {
        match self.scale {
            Scale::Linear => {
                let step = nice_ceiling((self.high - self.low) / 5.0);
                (0..=10)
                    .map(|i| self.low + step * f64::from(i))
                    .take_while(|tick| *tick <= self.high * 1.000_001)
                    .collect()
            }
            Scale::Log => {
                let (from, to) = (self.low.log10() as i32, self.high.log10() as i32);
                (from..=to).map(|power| 10f64.powi(power)).collect()
            }
        }
    }
}

/// The smallest 1, 2 or 5 times a power of ten at or above `value`.
fn nice_ceiling(value: f64) -> f64 {
    let power = 10f64.powf(value.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * power)
        .find(|nice| *nice >= value * 0.999_999)
        .unwrap_or(10.0 * power)
}

fn label(value: f64) -> String {
    if value == 0.0 {
        "0".into()
    } else if value.abs() >= 1e6 {
        format!("{:.0}M", value / 1e6)
    } else if value.abs() >= 1e4 {
        format!("{:.0}k", value / 1e3)
    } else if value.fract() == 0.0 {
        format!("{value:.0}")
    } else if value.abs() >= 1.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    }
}

/// Draws `series` as lines on one plot.
fn svg(out: &mut String, plot: &Plot<'_>, series: &[Series]) {
    let all = || series.iter().flat_map(|s| s.points.iter());
    let x = Axis::fit(plot.x_scale, all().map(|p| p.0));
    let y = Axis::fit(plot.y_scale, all().map(|p| p.1));
    let (plot_w, plot_h) = (WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM);
    let px = |value: f64| LEFT + x.fraction(value).clamp(0.0, 1.0) * plot_w;
    let py = |value: f64| TOP + (1.0 - y.fraction(value).clamp(0.0, 1.0)) * plot_h;
    let _ = writeln!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{HEIGHT}\" \
         viewBox=\"0 0 {WIDTH} {HEIGHT}\" role=\"img\" aria-label=\"{}\" font-size=\"11\">",
        escape(plot.title)
    );
    let _ = writeln!(
        out,
        "<text x=\"{}\" y=\"18\" text-anchor=\"middle\" font-size=\"13\">{}</text>",
        WIDTH / 2.0,
        escape(plot.title)
    );
    for tick in y.ticks() {
        let at = py(tick);
        let _ = writeln!(
            out,
            "<line x1=\"{LEFT}\" x2=\"{}\" y1=\"{at:.1}\" y2=\"{at:.1}\" stroke=\"#e4e4e4\"/>\
             <text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            LEFT + plot_w,
            LEFT - 6.0,
            at + 4.0,
            label(tick)
        );
    }
    for tick in x.ticks() {
        let at = px(tick);
        let _ = writeln!(
            out,
            "<line x1=\"{at:.1}\" x2=\"{at:.1}\" y1=\"{TOP}\" y2=\"{}\" stroke=\"#f0f0f0\"/>\
             <text x=\"{at:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            TOP + plot_h,
            TOP + plot_h + 15.0,
            label(tick)
        );
    }
    let _ = writeln!(
        out,
        "<rect x=\"{LEFT}\" y=\"{TOP}\" width=\"{plot_w}\" height=\"{plot_h}\" fill=\"none\" \
         stroke=\"#999\"/>\
         <text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\
         <text x=\"14\" y=\"{}\" text-anchor=\"middle\" transform=\"rotate(-90 14 {})\">{}</text>",
        LEFT + plot_w / 2.0,
        HEIGHT - 8.0,
        escape(plot.x_label),
        TOP + plot_h / 2.0,
        TOP + plot_h / 2.0,
        escape(plot.y_label)
    );
    for (index, line) in series.iter().enumerate() {
        let colour = COLOURS[line.colour % COLOURS.len()];
        let dash = line
            .dash
            .map_or_else(String::new, |dash| format!(" stroke-dasharray=\"{dash}\""));
        let finite: Vec<(f64, f64)> = line
            .points
            .iter()
            .copied()
            .filter(|(a, b)| a.is_finite() && b.is_finite())
            .collect();
        match finite.as_slice() {
            [] => {}
            [(a, b)] => {
                let _ = writeln!(
                    out,
                    "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"{colour}\"/>",
                    px(*a),
                    py(*b)
                );
            }
            points => {
                let coordinates: Vec<String> = points
                    .iter()
                    .map(|(a, b)| format!("{:.1},{:.1}", px(*a), py(*b)))
                    .collect();
                let _ = writeln!(
                    out,
                    "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.6\"{dash} points=\"{}\"/>",
                    coordinates.join(" ")
                );
            }
        }
        let legend_y = TOP + 14.0 + 14.0 * index as f64;
        let _ = writeln!(
            out,
            "<line x1=\"{}\" x2=\"{}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"{colour}\" stroke-width=\"2\"{dash}/>\
             <text x=\"{}\" y=\"{:.1}\">{}</text>",
            LEFT + plot_w - 140.0,
            LEFT + plot_w - 112.0,
            legend_y - 4.0,
            legend_y - 4.0,
            LEFT + plot_w - 106.0,
            legend_y,
            escape(&line.name)
        );
    }
    out.push_str("</svg>\n");
}

/// `text` safe inside HTML text and attribute values.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_ceilings_are_one_two_or_five_times_a_power_of_ten() {
        assert_eq!(nice_ceiling(0.7), 1.0);
        assert_eq!(nice_ceiling(1.0), 1.0);
        assert_eq!(nice_ceiling(1.3), 2.0);
        assert_eq!(nice_ceiling(420.0), 500.0);
        assert_eq!(nice_ceiling(7_000.0), 10_000.0);
    }

    #[test]
    fn log_axes_span_whole_powers_of_ten() {
        let axis = Axis::fit(Scale::Log, [35.0, 4_200.0].into_iter());
        assert_eq!((axis.low, axis.high), (10.0, 10_000.0));
        assert_eq!(axis.ticks(), vec![10.0, 100.0, 1_000.0, 10_000.0]);
        assert!((axis.fraction(100.0) - 1.0 / 3.0).abs() < 1e-9);
    }

    #[test]
    fn text_is_escaped() {
        assert_eq!(
            escape("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }

    #[test]
    fn a_report_without_time_lines_says_so() {
        let html = html(&BenchConfig::default(), &[]);
        assert!(html.starts_with("<!doctype html>"));
        assert!(html.contains("No figures over time"));
        assert!(!html.contains("<script"));
    }
}
