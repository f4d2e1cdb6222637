//! `simulate --plot`: one chart panel per strategy, stacked vertically,
//! showing what each strategy admitted and denied over time for one key.
//!
//! In each panel, x is the time since the trace's first request (in
//! seconds); the blue step line is the units admitted for the key within the
//! trailing window `(x - W, x]`, so its highest point is the key's
//! `max_in_window`; the dashed line is the limit `L`, and every denied
//! request is a red cross on the x axis at its time. A fixed window shows
//! its boundary bursts as steps up to `2L`; the other strategies stay near
//! `L`. A calendar window (a quota per day, month, ...) draws instead the
//! units admitted in the current period, which fall to zero at each
//! boundary, drawn as a dotted vertical line.
//!
//! Charts are drawn with `plotters`: SVG (text as SVG text) or PNG (text
//! rasterised with the DejaVu Sans font embedded in the binary, so no system
//! font is needed). The file is written as [`crate::output`] describes: a
//! regular file through a temporary file moved into place when complete.

mod text;

use std::fmt::Write as _;
use std::fs::File;
use std::io::{self, Write as _};
use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::FontStyle;
use tollgate::calendar::Calendar;

use crate::replay;

use crate::output::Output;
use crate::shown::shown;

/// The embedded font (DejaVu Sans; license in `assets/DejaVuSans-LICENSE.txt`).
static FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");

/// The font family name the charts use.
const FAMILY: &str = "sans-serif";

/// The default width of a chart in pixels.
pub const DEFAULT_WIDTH: u32 = 1000;

/// The default height of one strategy's panel in pixels.
pub const PANEL_HEIGHT: u32 = 260;

/// The height of the chart's title band (title and legend) in pixels.
const TITLE_HEIGHT: u32 = 70;

/// The smallest width and height accepted.
pub const MIN_SIZE: (u32, u32) = (320, 240);

/// The largest width and height accepted (a PNG this size takes about
/// 190 MB of memory while drawn).
pub const MAX_SIZE: (u32, u32) = (8000, 8000);

/// The file formats a chart can be written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Scalable vector graphics.
    Svg,
    /// A PNG bitmap.
    Png,
}

impl Format {
    /// The format named by `path`'s extension (`.svg` or `.png`, any case).
    ///
    /// # Errors
    ///
    /// A message saying which extensions are accepted.
    pub fn from_path(path: &Path) -> Result<Format, String> {
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        match ext.as_deref() {
            Some("svg") => Ok(Format::Svg),
            Some("png") => Ok(Format::Png),
            Some(other) => Err(format!(
                "unsupported extension .{other}: the file name must end in .svg or .png"
            )),
            None => Err("the file name must end in .svg or .png".to_owned()),
        }
    }
}

/// Parses a chart size written `WIDTHxHEIGHT` in pixels, e.g. `1200x800`.
///
/// # Errors
///
/// A message naming the accepted form and range.
pub fn parse_size(text: &str) -> Result<(u32, u32), String> {
    let bad = || {
        format!(
            "expected WIDTHxHEIGHT in pixels, e.g. 1200x800, each from {} to {}",
            MIN_SIZE.0, MAX_SIZE.0
        )
    };
    let (w, h) = text.trim().split_once(['x', 'X']).ok_or_else(bad)?;
    let parse = |s: &str| s.trim().parse::<u32>().map_err(|_| bad());
    let (w, h) = (parse(w)?, parse(h)?);
    if !(MIN_SIZE.0..=MAX_SIZE.0).contains(&w) || !(MIN_SIZE.1..=MAX_SIZE.1).contains(&h) {
        return Err(bad());
    }
    Ok((w, h))
}

/// The default size of a chart with `panels` panels.
pub fn default_size(panels: usize) -> (u32, u32) {
    let panels = u32::try_from(panels.max(1)).unwrap_or(u32::MAX);
    let height = PANEL_HEIGHT
        .saturating_mul(panels)
        .saturating_add(TITLE_HEIGHT)
        .clamp(MIN_SIZE.1, MAX_SIZE.1);
    (DEFAULT_WIDTH, height)
}

/// One request of the plotted key as a strategy decided it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    /// The request's time in nanoseconds since the Unix epoch.
    pub nanos: u64,
    /// The units it costs.
    pub cost: u64,
    /// Whether it was admitted.
    pub allowed: bool,
}

/// One panel: a policy and what it decided for the plotted key.
#[derive(Clone, Debug)]
pub struct Panel {
    /// What the panel shows: a strategy's name, or a policy file's target.
    pub name: String,
    /// The limit `L` drawn: the policy's, or for a compound policy that of
    /// the limit the panel shows.
    pub limit: u64,
    /// The window `W` of that limit: the trailing window of the step line.
    pub window: Duration,
    /// The calendar of that limit when it counts in a calendar's periods:
    /// the step line counts the current period, and the boundaries are
    /// drawn.
    pub calendar: Option<Calendar>,
    /// The plotted key's requests with their decisions, in any order.
    pub events: Vec<Event>,
}

/// What a chart shows.
#[derive(Clone, Debug)]
pub struct Chart<'a> {
    /// The plotted key.
    pub key: &'a str,
    /// How many requests the key made.
    pub requests: usize,
    /// Whether the key was chosen as the busiest of the trace.
    pub busiest: bool,
    /// What the policies are, after the key in the title: `limit 10 per
    /// 10s`, or `policies from FILE`.
    pub policies: String,
    /// The time of the trace's first request, in nanoseconds since the
    /// epoch: x = 0.
    pub start: u64,
    /// The time of the trace's last request: the right end of the x axis.
    pub end: u64,
    /// One panel per strategy, drawn top to bottom.
    pub panels: Vec<Panel>,
}

/// Why a chart could not be written.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// The temporary file could not be created, written or moved.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// The drawing library failed.
    #[error("cannot draw the chart: {0}")]
    Draw(String),
}

/// The step line of units admitted within the trailing window: points
/// `(seconds since start, units)`, with a vertical step at every admission
/// (up) and every admission's expiry one window later (down).
///
/// The units at `x` count admitted requests at times `t` with
/// `x - W < t <= x`, so the line's maximum is the key's largest total
/// within any window-long interval, the summary's `max_in_window`.
pub fn trailing_admitted(events: &[Event], window: Duration, start: u64) -> Vec<(f64, f64)> {
    let window = window.as_nanos();
    // (time, change): +cost when admitted, -cost one window later.
    let mut changes: Vec<(u128, i128)> = Vec::new();
    for e in events.iter().filter(|e| e.allowed && e.cost > 0) {
        let t = u128::from(e.nanos);
        changes.push((t, i128::from(e.cost)));
        changes.push((t + window, -i128::from(e.cost)));
    }
    changes.sort_unstable_by_key(|&(t, _)| t);
    let x = |t: u128| t.saturating_sub(u128::from(start)) as f64 / 1e9;
    let mut points = vec![(0.0, 0.0)];
    let mut level: i128 = 0;
    let mut i = 0;
    while i < changes.len() {
        let t = changes[i].0;
        let before = level;
        while i < changes.len() && changes[i].0 == t {
            level += changes[i].1;
            i += 1;
        }
        if level != before {
            points.push((x(t), before as f64));
            points.push((x(t), level as f64));
        }
    }
    simplify(points)
}

/// The step line of units admitted in the current period of `calendar`:
/// points `(seconds since start, units)`, up at every admission and down
/// to zero at every boundary after one, up to `end`.
pub fn period_admitted(events: &[Event], calendar: Calendar, start: u64, end: u64) -> Vec<(f64, f64)> {
    let mut admitted: Vec<(u64, u64)> = events
        .iter()
        .filter(|e| e.allowed && e.cost > 0)
        .map(|e| (e.nanos, e.cost))
        .collect();
    admitted.sort_unstable();
    let x = |t: u64| t.saturating_sub(start) as f64 / 1e9;
    let mut points = vec![(0.0, 0.0)];
    let mut level: u128 = 0;
    let mut period_end = 0;
    for (t, cost) in admitted {
        if t >= period_end {
            if level > 0 {
                points.push((x(period_end), level as f64));
                points.push((x(period_end), 0.0));
            }
            level = 0;
            period_end = replay::period_end(calendar, t);
        }
        points.push((x(t), level as f64));
        level += u128::from(cost);
        points.push((x(t), level as f64));
    }
    if level > 0 && period_end <= end {
        points.push((x(period_end), level as f64));
        points.push((x(period_end), 0.0));
    }
    simplify(points)
}

/// Drops points that add nothing to a step line: repeats of the previous
/// point, and the middle of three points on one horizontal or vertical line.
fn simplify(points: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    let mut out: Vec<(f64, f64)> = Vec::with_capacity(points.len());
    for p in points {
        if out.last() == Some(&p) {
            continue;
        }
        if let [.., a, b] = out[..] {
            if (a.0 == b.0 && b.0 == p.0) || (a.1 == b.1 && b.1 == p.1) {
                out.pop();
            }
        }
        out.push(p);
    }
    out
}

/// Draws `chart` to `path` in `format`, `size` pixels wide and high.
///
/// # Errors
///
/// [`PlotError`] when the file cannot be written or drawing fails; no
/// partial file is left at `path`.
pub fn write(chart: &Chart<'_>, path: &Path, format: Format, size: (u32, u32)) -> Result<(), PlotError> {
    register_font()?;
    let suffix = match format {
        Format::Svg => ".svg",
        Format::Png => ".png",
    };
    let mut out = Output::create(path, ".tollgate-plot-", suffix)?;
    match format {
        Format::Svg => {
            let mut svg = String::new();
            {
                let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
                draw(chart, &root)?;
                root.present().map_err(draw_error)?;
            }
            out.write_all(svg.as_bytes())?;
        }
        Format::Png => {
            // The bitmap backend writes to a path: draw into a scratch file,
            // then copy it to the output (which may be a FIFO or device).
            let scratch = tempfile::Builder::new()
                .prefix(".tollgate-plot-")
                .suffix(suffix)
                .tempfile()?;
            let font = ab_glyph::FontRef::try_from_slice(FONT)
                .map_err(|_| PlotError::Draw("the embedded font cannot be read".to_owned()))?;
            {
                let backend = text::TextBackend::new(BitMapBackend::new(scratch.path(), size), font);
                let root = backend.into_drawing_area();
                draw(chart, &root)?;
                root.present().map_err(draw_error)?;
            }
            io::copy(&mut File::open(scratch.path())?, &mut out)?;
        }
    }
    out.finish()?.persist()?;
    Ok(())
}

/// Makes the embedded font the charts' sans-serif family (once).
fn register_font() -> Result<(), PlotError> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok =
        *REGISTERED.get_or_init(|| plotters::style::register_font(FAMILY, FontStyle::Normal, FONT).is_ok());
    if ok {
        Ok(())
    } else {
        Err(PlotError::Draw("the embedded font cannot be read".to_owned()))
    }
}

/// Converts any drawing error into a [`PlotError`].
fn draw_error(err: impl std::fmt::Display) -> PlotError {
    PlotError::Draw(err.to_string())
}

/// The colour of the admitted units.
const BLUE: RGBColor = RGBColor(31, 100, 180);

/// The colour of denied requests.
const RED: RGBColor = RGBColor(214, 39, 40);

/// Draws the title band and the panels on `root`.
fn draw<DB: DrawingBackend>(chart: &Chart<'_>, root: &DrawingArea<DB, Shift>) -> Result<(), PlotError> {
    root.fill(&WHITE).map_err(draw_error)?;
    let (band, body) = root.split_vertically(TITLE_HEIGHT);
    draw_title(chart, &band)?;
    let areas = body.split_evenly((chart.panels.len().max(1), 1));
    // Every panel shares the x axis, and the y axis too when the limits are
    // equal, so the strategies compare at a glance.
    let x_max = (chart.end.saturating_sub(chart.start) as f64 / 1e9).max(1e-9);
    let series: Vec<Vec<(f64, f64)>> = chart
        .panels
        .iter()
        .map(|p| {
            let points = match p.calendar {
                Some(calendar) => period_admitted(&p.events, calendar, chart.start, chart.end),
                None => trailing_admitted(&p.events, p.window, chart.start),
            };
            clip(points, x_max)
        })
        .collect();
    let top = |panel: &Panel, points: &[(f64, f64)]| {
        points.iter().map(|&(_, y)| y).fold(panel.limit as f64, f64::max)
    };
    let shared = chart.panels.windows(2).all(|w| w[0].limit == w[1].limit);
    let y_all = chart
        .panels
        .iter()
        .zip(&series)
        .map(|(p, s)| top(p, s))
        .fold(0.0, f64::max);
    for ((panel, area), points) in chart.panels.iter().zip(&areas).zip(&series) {
        let y = if shared { y_all } else { top(panel, points) };
        draw_panel(chart, panel, area, points, (x_max, (y * 1.12).max(1.0)))?;
    }
    Ok(())
}

/// What a panel's step line counts, for the legend: `the trailing 1m`, or
/// `the current month (a dotted line at each boundary)`.
fn span_words(panel: &Panel) -> String {
    match panel.calendar {
        Some(calendar) => format!(
            "the current {} of {} (a dotted line where one ends)",
            calendar.period(),
            calendar.time_zone()
        ),
        None => format!("the trailing {}", humantime::format_duration(panel.window)),
    }
}

/// Draws the title line and, below it, the legend.
fn draw_title<DB: DrawingBackend>(chart: &Chart<'_>, band: &DrawingArea<DB, Shift>) -> Result<(), PlotError> {
    let key = shown(chart.key);
    let mut title = format!(
        "key {key}: {} request{}",
        chart.requests,
        if chart.requests == 1 { "" } else { "s" }
    );
    if chart.busiest {
        title.push_str(" (the busiest key)");
    }
    let _ = write!(title, ", {}", chart.policies);
    let text = |size| TextStyle::from((FAMILY, size).into_font()).color(&BLACK);
    band.draw_text(&title, &text(22), (16, 10)).map_err(draw_error)?;
    // The legend: a sample of each mark followed by its meaning. With one
    // window and one limit they are named; otherwise each panel says its own.
    let uniform = chart
        .panels
        .windows(2)
        .all(|w| (w[0].limit, w[0].window, w[0].calendar) == (w[1].limit, w[1].window, w[1].calendar));
    let (window, limit) = match chart.panels.first() {
        Some(p) if uniform => (span_words(p), format!("the limit, {}", p.limit)),
        _ => ("the trailing window".to_owned(), "the limit".to_owned()),
    };
    let y = 52;
    let mut x = 16;
    let label = text(14).pos(Pos::new(HPos::Left, VPos::Center));
    let items = [
        format!("units admitted in {window}"),
        limit,
        "a denied request (at its time)".to_owned(),
    ];
    for (mark, words) in items.iter().enumerate() {
        match mark {
            0 => {
                band.draw(&Rectangle::new(
                    [(x, y - 6), (x + 22, y + 6)],
                    BLUE.mix(0.25).filled(),
                ))
                .map_err(draw_error)?;
                band.draw(&PathElement::new(
                    [(x, y - 6), (x + 22, y - 6)],
                    BLUE.stroke_width(1),
                ))
                .map_err(draw_error)?;
            }
            1 => {
                for (from, to) in [(0, 8), (13, 22)] {
                    band.draw(&PathElement::new(
                        [(x + from, y), (x + to, y)],
                        BLACK.stroke_width(1),
                    ))
                    .map_err(draw_error)?;
                }
            }
            _ => {
                band.draw(&Cross::new((x + 11, y), 4, RED.stroke_width(1)))
                    .map_err(draw_error)?;
            }
        }
        band.draw_text(words, &label, (x + 30, y)).map_err(draw_error)?;
        let (w, _) = band.estimate_text_size(words, &label).map_err(draw_error)?;
        x += 30 + i32::try_from(w).unwrap_or(0) + 28;
    }
    Ok(())
}

/// Thins a line sorted by x to at most four points per interval of
/// `width` along x: the first, the lowest, the highest and the last, in
/// their order. The shape at that resolution, and every extreme, stay.
fn decimate(points: &[(f64, f64)], width: f64) -> Vec<(f64, f64)> {
    if width.is_nan() || width <= 0.0 || points.len() <= 4 {
        return points.to_vec();
    }
    let mut out = Vec::with_capacity(points.len().min(4096));
    let mut start = 0;
    while start < points.len() {
        let column = (points[start].0 / width).floor();
        let mut end = start + 1;
        while end < points.len() && (points[end].0 / width).floor() == column {
            end += 1;
        }
        let group = &points[start..end];
        let low = (0..group.len())
            .min_by(|&a, &b| group[a].1.total_cmp(&group[b].1))
            .unwrap_or(0);
        let high = (0..group.len())
            .max_by(|&a, &b| group[a].1.total_cmp(&group[b].1))
            .unwrap_or(0);
        let mut keep = [0, low, high, group.len() - 1];
        keep.sort_unstable();
        for (i, &k) in keep.iter().enumerate() {
            if i == 0 || k != keep[i - 1] {
                out.push(group[k]);
            }
        }
        start = end;
    }
    out
}

/// Cuts a step line at `x_max`.
fn clip(mut points: Vec<(f64, f64)>, x_max: f64) -> Vec<(f64, f64)> {
    if let Some(cut) = points.iter().position(|&(x, _)| x > x_max) {
        let level = points[cut.saturating_sub(1)].1;
        points.truncate(cut);
        points.push((x_max, level));
    }
    points
}

/// Formats an axis value without trailing zeros: `20`, `2.5`, `0.125`.
fn tick(value: &f64) -> String {
    let text = format!("{value:.3}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text == "-0" {
        "0".to_owned()
    } else {
        text.to_owned()
    }
}

/// A panel's caption (its name, how many requests were admitted and
/// denied, and the peak of `points` in a window), and the window the y
/// axis counts in (`last 1m`, `this month`).
fn panel_caption(panel: &Panel, points: &[(f64, f64)]) -> (String, String) {
    let (window, last) = match panel.calendar {
        Some(calendar) => (
            format!("a {}", calendar.period()),
            format!("this {}", calendar.period()),
        ),
        None => {
            let window = humantime::format_duration(panel.window).to_string();
            (window.clone(), format!("last {window}"))
        }
    };
    let admitted = panel.events.iter().filter(|e| e.allowed).count();
    let denied = panel.events.len() - admitted;
    let peak = points.iter().map(|&(_, y)| y).fold(0.0_f64, f64::max);
    let caption = format!(
        "{}: {admitted} admitted, {denied} denied, peak {peak} in {window}",
        panel.name
    );
    (caption, last)
}

/// The pixel columns, of `columns` across `x_max` seconds from `start`
/// (in nanoseconds), in which the panel has a denied request, each once
/// and in order.
fn denied_columns(panel: &Panel, start: u64, x_max: f64, columns: f64) -> Vec<u64> {
    // One cross per pixel column is all that shows.
    let mut columns_denied: Vec<u64> = panel
        .events
        .iter()
        .filter(|e| !e.allowed)
        .map(|e| {
            let x = (e.nanos.saturating_sub(start) as f64 / 1e9).min(x_max);
            (x / x_max * columns) as u64
        })
        .collect();
    columns_denied.sort_unstable();
    columns_denied.dedup();
    columns_denied
}

/// Draws one strategy's panel.
fn draw_panel<DB: DrawingBackend>(
    chart: &Chart<'_>,
    panel: &Panel,
    area: &DrawingArea<DB, Shift>,
    points: &[(f64, f64)],
    (x_max, y_max): (f64, f64),
) -> Result<(), PlotError> {
    let (caption, last) = panel_caption(panel, points);
    let mut ctx = ChartBuilder::on(area)
        .caption(caption, (FAMILY, 17))
        .margin(8)
        .margin_right(24)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)
        .map_err(draw_error)?;
    ctx.configure_mesh()
        .light_line_style(WHITE.mix(0.0))
        .bold_line_style(BLACK.mix(0.08))
        .x_desc("seconds since the trace's start")
        .y_desc(format!("admitted, {last}"))
        .x_label_formatter(&tick)
        .y_label_formatter(&tick)
        .label_style((FAMILY, 13))
        .axis_desc_style((FAMILY, 13))
        .draw()
        .map_err(draw_error)?;
    // At most a few points per pixel column: the file stays small for busy
    // keys, and every column keeps its lowest and highest level.
    let columns = f64::from(area.dim_in_pixel().0.max(1));
    let points = decimate(points, x_max / columns);
    ctx.draw_series(AreaSeries::new(points.iter().copied(), 0.0, BLUE.mix(0.25)))
        .map_err(draw_error)?;
    ctx.draw_series(LineSeries::new(points.iter().copied(), BLUE.stroke_width(1)))
        .map_err(draw_error)?;
    let limit = panel.limit as f64;
    ctx.draw_series(DashedLineSeries::new(
        [(0.0, limit), (x_max, limit)],
        8,
        5,
        BLACK.stroke_width(1),
    ))
    .map_err(draw_error)?;
    let start = chart.start;
    // Where a calendar's period ends and every count starts again.
    if let Some(calendar) = panel.calendar {
        for boundary in replay::boundaries(calendar, (start, chart.end)) {
            let x = boundary.saturating_sub(start) as f64 / 1e9;
            ctx.draw_series(DashedLineSeries::new(
                [(x, 0.0), (x, y_max)],
                2,
                4,
                BLACK.mix(0.6).stroke_width(1),
            ))
            .map_err(draw_error)?;
        }
    }
    let columns_denied = denied_columns(panel, start, x_max, columns);
    let crosses = columns_denied.into_iter().map(move |column| {
        let x = (column as f64 / columns * x_max).min(x_max);
        Cross::new((x, 0.0), 4, RED.stroke_width(1))
    });
    ctx.draw_series(crosses).map_err(draw_error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::peak_units;

    #[test]
    fn formats_follow_the_extension() {
        assert_eq!(Format::from_path(Path::new("a.svg")), Ok(Format::Svg));
        assert_eq!(Format::from_path(Path::new("dir/a.PNG")), Ok(Format::Png));
        assert!(Format::from_path(Path::new("a.jpg"))
            .unwrap_err()
            .contains(".jpg"));
        assert!(Format::from_path(Path::new("plot")).is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("1200x800"), Ok((1200, 800)));
        assert_eq!(parse_size(" 320X240 "), Ok((320, 240)));
        for bad in [
            "", "1200", "x", "1200x", "0x800", "319x800", "8001x800", "-1x5", "1e3x800",
        ] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
        assert_eq!(default_size(4), (1000, 4 * PANEL_HEIGHT + TITLE_HEIGHT));
        assert_eq!(default_size(1), (1000, PANEL_HEIGHT + TITLE_HEIGHT));
        assert_eq!(default_size(usize::MAX), (1000, MAX_SIZE.1));
    }

    fn event(ms: u64, cost: u64, allowed: bool) -> Event {
        Event {
            nanos: ms * 1_000_000,
            cost,
            allowed,
        }
    }

    #[test]
    fn trailing_window_steps_up_on_admission_and_down_one_window_later() {
        let events = [
            event(1_000, 1, true),
            event(1_500, 2, true),
            event(1_600, 1, false),
            event(2_000, 1, true),
        ];
        let points = trailing_admitted(&events, Duration::from_secs(1), 1_000_000_000);
        assert_eq!(
            points,
            [
                (0.0, 0.0),
                (0.0, 1.0),
                (0.5, 1.0),
                (0.5, 3.0),
                // At 2 s the first unit leaves and the last one arrives:
                // no step.
                (1.5, 3.0),
                (1.5, 1.0),
                (2.0, 1.0),
                (2.0, 0.0),
            ]
        );
    }

    proptest::proptest! {
        #[test]
        fn the_step_lines_peak_is_max_in_window(
            window_ms in 1..=50u64,
            events in proptest::collection::vec((0..300u64, 0..4u64, proptest::bool::weighted(2.0 / 3.0)), 0..40),
        ) {
            let window = Duration::from_millis(window_ms);
            let events: Vec<Event> = events
                .into_iter()
                .map(|(ms, cost, allowed)| event(ms, cost, allowed))
                .collect();
            let mut admitted: Vec<(u64, u64)> = events
                .iter()
                .filter(|e| e.allowed && e.cost > 0)
                .map(|e| (e.nanos, e.cost))
                .collect();
            let expected = peak_units(&mut admitted, window.as_nanos()) as f64;
            let peak = trailing_admitted(&events, window, 0)
                .iter()
                .map(|&(_, y)| y)
                .fold(0.0, f64::max);
            proptest::prop_assert_eq!(peak, expected);
        }
    }

    #[test]
    fn simplifying_keeps_only_corners() {
        let points = vec![
            (0.0, 0.0),
            (0.0, 0.0),
            (1.0, 0.0),
            (2.0, 0.0),
            (2.0, 1.0),
            (2.0, 3.0),
            (4.0, 3.0),
        ];
        assert_eq!(simplify(points), [(0.0, 0.0), (2.0, 0.0), (2.0, 3.0), (4.0, 3.0)]);
        assert_eq!(simplify(vec![]), []);
    }

    #[test]
    fn decimation_keeps_the_ends_and_the_extremes_of_each_column() {
        let points: Vec<(f64, f64)> = (0..1000).map(|i| (i as f64 / 100.0, (i % 7) as f64)).collect();
        let thin = decimate(&points, 1.0);
        assert!(thin.len() <= 40, "{}", thin.len());
        assert_eq!(thin.first(), points.first());
        assert_eq!(thin.last(), points.last());
        for column in 0..10 {
            let of = |v: &[(f64, f64)]| -> Vec<f64> {
                v.iter()
                    .filter(|p| p.0.floor() == column as f64)
                    .map(|p| p.1)
                    .collect()
            };
            let (all, kept) = (of(&points), of(&thin));
            let max = |v: &[f64]| v.iter().copied().fold(f64::MIN, f64::max);
            let min = |v: &[f64]| v.iter().copied().fold(f64::MAX, f64::min);
            assert_eq!(
                (min(&kept), max(&kept)),
                (min(&all), max(&all)),
                "column {column}"
            );
        }
        // Sorted by x still, and short lines are left alone.
        assert!(thin.windows(2).all(|w| w[0].0 <= w[1].0));
        assert_eq!(decimate(&points[..3], 1.0), &points[..3]);
        assert_eq!(decimate(&points, 0.0), points);
    }

    #[test]
    fn ticks_have_no_trailing_zeros() {
        assert_eq!(tick(&20.0), "20");
        assert_eq!(tick(&2.5), "2.5");
        assert_eq!(tick(&0.125), "0.125");
        assert_eq!(tick(&0.0), "0");
        assert_eq!(tick(&-0.0001), "0");
        assert_eq!(tick(&120.0), "120");
    }

    #[test]
    fn clipping_keeps_the_level_at_the_edge() {
        let points = vec![(0.0, 0.0), (1.0, 0.0), (1.0, 2.0), (3.0, 2.0), (3.0, 0.0)];
        assert_eq!(
            clip(points.clone(), 2.0),
            [(0.0, 0.0), (1.0, 0.0), (1.0, 2.0), (2.0, 2.0)]
        );
        assert_eq!(clip(points.clone(), 5.0), points);
    }
}
