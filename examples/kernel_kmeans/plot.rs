//! `--plot FILE.png|FILE.svg`: one row per fit, the points coloured by cluster (in the plane
//! of [`projection`](super::projection)) beside the objective per iteration, drawn with
//! plotters. Text is set in a TrueType font found on the system.

use super::data::Data;
use super::error::CliError;
use super::projection::{project, Projection};
use super::report::Outcome;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::FontStyle;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The most points a scatter draws (larger data: evenly spaced points).
const MAX_POINTS: usize = 20_000;
/// Pixels of one row of panels, and the picture's width.
const ROW_HEIGHT: u32 = 480;
const WIDTH: u32 = 1200;

/// The picture's file format, from the file name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// PNG.
    Png,
    /// SVG.
    Svg,
}

impl Format {
    /// The format of `path`: `.png` or `.svg` (any case); anything else is a usage error.
    pub fn of(path: &Path) -> Result<Format, CliError> {
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        match ext.as_deref() {
            Some("png") => Ok(Format::Png),
            Some("svg") => Ok(Format::Svg),
            _ => Err(CliError::Usage(format!(
                "--plot {}: the picture is written as .png or .svg; name the file so",
                path.display()
            ))),
        }
    }
}

/// Places TrueType fonts usually are, searched in order (the first `.ttf` found serves).
const FONT_DIRS: [&str; 4] = [
    "/usr/share/fonts",
    "/usr/local/share/fonts",
    "/Library/Fonts",
    "C:\\Windows\\Fonts",
];

/// Font files preferred where present.
const PREFERRED_FONTS: [&str; 3] = ["DejaVuSans.ttf", "LiberationSans-Regular.ttf", "Arial.ttf"];

/// Makes `font`, or else a TrueType font of the system, plotters' `sans-serif` (once per
/// process: after one has been registered, later calls keep it, though a `font` they name is
/// still checked); an error names where it looked and what helps.
pub fn load_font(font: Option<&Path>) -> Result<(), CliError> {
    static REGISTERED: OnceLock<()> = OnceLock::new();
    // A font named on the command line is always checked, even where one is registered.
    if font.is_none() && REGISTERED.get().is_some() {
        return Ok(());
    }
    let path = font
        .map(Path::to_path_buf)
        .or_else(find_font)
        .ok_or_else(|| {
            CliError::Data(format!(
                "--plot needs a TrueType font for its text and found none under {}; install one \
             (for example Debian's fonts-dejavu-core) or name one with --plot-font FILE.ttf",
                FONT_DIRS.join(", ")
            ))
        })?;
    let unusable = || CliError::Data(format!("{} is not a usable TrueType font", path.display()));
    let bytes = std::fs::read(&path)
        .map_err(|e| CliError::Data(format!("cannot read the font {}: {e}", path.display())))?;
    // plotters takes any bytes and would draw without text: parse them first.
    ab_glyph::FontRef::try_from_slice(&bytes).map_err(|_| unusable())?;
    if REGISTERED.get().is_some() {
        return Ok(());
    }
    // plotters keeps fonts for the life of the process.
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
        .map_err(|_| unusable())?;
    // Two threads may both register a font: either serves.
    let _ = REGISTERED.set(());
    Ok(())
}

/// A preferred font if there is one, else the first `.ttf` in [`FONT_DIRS`].
fn find_font() -> Option<PathBuf> {
    let mut fonts = Vec::new();
    for dir in FONT_DIRS {
        collect_ttf(Path::new(dir), 4, &mut fonts);
    }
    PREFERRED_FONTS
        .iter()
        .find_map(|name| {
            fonts
                .iter()
                .find(|p| p.file_name().is_some_and(|f| f == *name))
        })
        .or(fonts.first())
        .cloned()
}

/// The `.ttf` files under `dir`, `depth` folders down at most, in name order.
fn collect_ttf(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for p in paths {
        if p.is_dir() && depth > 0 {
            collect_ttf(&p, depth - 1, out);
        } else if p.extension().is_some_and(|e| e.eq_ignore_ascii_case("ttf")) {
            out.push(p);
        }
    }
}

/// Draws the fits of `outcomes` on `data` into `path`.
pub fn write(path: &Path, data: &Data, outcomes: &[Outcome]) -> Result<(), CliError> {
    let format = Format::of(path)?;
    load_font(None)?;
    let plane = project(&data.x, data.n, data.d);
    let size = (WIDTH, ROW_HEIGHT * outcomes.len().max(1) as u32);
    let drawn = match format {
        Format::Png => draw(
            BitMapBackend::new(path, size).into_drawing_area(),
            &plane,
            outcomes,
        ),
        Format::Svg => draw(
            SVGBackend::new(path, size).into_drawing_area(),
            &plane,
            outcomes,
        ),
    };
    drawn.map_err(|message| CliError::Plot {
        path: path.to_path_buf(),
        message,
    })
}

/// Every fit's row: the scatter, then the objective.
fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    plane: &Projection,
    outcomes: &[Outcome],
) -> Result<(), String> {
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let panels = root.split_evenly((outcomes.len().max(1), 2));
    for (o, pair) in outcomes.iter().zip(panels.chunks(2)) {
        scatter(&pair[0], plane, o).map_err(|e| e.to_string())?;
        objective(&pair[1], o).map_err(|e| e.to_string())?;
    }
    root.present().map_err(|e| e.to_string())
}

/// `[lo, hi]` widened by 5% on each side (and to a unit width where all values are equal).
fn padded(values: impl Iterator<Item = f64>) -> std::ops::Range<f64> {
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    if !(lo.is_finite() && hi.is_finite()) {
        return 0.0..1.0;
    }
    let pad = if hi > lo { 0.05 * (hi - lo) } else { 0.5 };
    (lo - pad)..(hi + pad)
}

/// The ranges widened so that a unit is as long on both axes of an area of `(width, height)`
/// pixels (less the margins, labels and caption): circles stay round.
fn equal_scales(
    x: std::ops::Range<f64>,
    y: std::ops::Range<f64>,
    (width, height): (u32, u32),
) -> (std::ops::Range<f64>, std::ops::Range<f64>) {
    let w = f64::from(width.saturating_sub(24 + 55).max(1));
    let h = f64::from(height.saturating_sub(24 + 40 + 30).max(1));
    let per_pixel = ((x.end - x.start) / w).max((y.end - y.start) / h);
    let widen = |r: std::ops::Range<f64>, pixels: f64| {
        let mid = 0.5 * (r.start + r.end);
        (mid - 0.5 * per_pixel * pixels)..(mid + 0.5 * per_pixel * pixels)
    };
    (widen(x, w), widen(y, h))
}

/// What drawing on a backend gives.
type Drawn<DB> = Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

/// The points coloured by cluster.
fn scatter<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    plane: &Projection,
    o: &Outcome,
) -> Drawn<DB> {
    let stride = plane.xy.len().div_ceil(MAX_POINTS).max(1);
    let shown = || plane.xy.iter().zip(&o.fit.labels).step_by(stride);
    let score = o
        .scores
        .map(|s| format!(", ARI {:.3}", s.ari))
        .unwrap_or_default();
    let sample = if stride > 1 {
        format!(" (every {stride}th point)")
    } else {
        String::new()
    };
    let (x_range, y_range) = equal_scales(
        padded(shown().map(|(p, _)| p.0)),
        padded(shown().map(|(p, _)| p.1)),
        area.dim_in_pixel(),
    );
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!(
                "{} kernel: {} clusters{score}{sample}",
                o.spec.name, o.spec.params.k
            ),
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(55)
        .build_cartesian_2d(x_range, y_range)?;
    chart
        .configure_mesh()
        .x_desc(plane.axes[0])
        .y_desc(plane.axes[1])
        .light_line_style(TRANSPARENT)
        .label_style(("sans-serif", 13))
        .draw()?;
    chart.draw_series(shown().map(|(&(x, y), &label)| {
        Circle::new((x, y), 2, Palette99::pick(label as usize).filled())
    }))?;
    Ok(())
}

/// The objective of the labels at the start of every iteration.
fn objective<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, o: &Outcome) -> Drawn<DB> {
    let history = &o.fit.objective_history;
    let points: Vec<(i32, f64)> = (1..).zip(history.iter().copied()).collect();
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!(
                "objective per iteration ({} iterations, {})",
                o.fit.iterations,
                if o.fit.converged {
                    "converged"
                } else {
                    "not converged"
                }
            ),
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d(
            0..(points.len() as i32 + 1),
            padded(history.iter().copied()),
        )?;
    chart
        .configure_mesh()
        .x_desc("iteration")
        .y_desc("objective")
        .light_line_style(TRANSPARENT)
        .label_style(("sans-serif", 13))
        .draw()?;
    chart.draw_series(LineSeries::new(
        points.iter().copied(),
        BLUE.stroke_width(2),
    ))?;
    chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, BLUE.filled())))?;
    Ok(())
}
