//! SVG line charts of a run's series (allocation over time, over arrived load), drawn by `plotters`.

use std::path::Path;

use plotters::prelude::*;

/// Why a chart could not be drawn.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// The chart has no point to draw.
    #[error("chart {0:?} has no points")]
    Empty(String),
    /// The drawing backend failed (usually writing the file).
    #[error("drawing {path}: {message}")]
    Draw {
        /// The file being written.
        path: String,
        /// The backend's message.
        message: String,
    },
}

/// One named line of a chart.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// Points (x, y) in drawing order.
    pub points: Vec<(f64, f64)>,
}

/// A line chart: title, axis labels and its series.
#[derive(Clone, Debug, PartialEq)]
pub struct LineChart {
    /// Title above the plot.
    pub title: String,
    /// X axis label.
    pub x_label: String,
    /// Y axis label.
    pub y_label: String,
    /// The lines.
    pub series: Vec<Series>,
}

/// Colours of successive series (a colour-blind-safe palette).
const PALETTE: [RGBColor; 8] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
    RGBColor(0, 0, 0),
    RGBColor(240, 228, 66),
];

impl LineChart {
    /// The smallest box holding every point, widened where it is flat so that the axes have a span.
    fn bounds(&self) -> Option<((f64, f64), (f64, f64))> {
        let mut points = self
            .series
            .iter()
            .flat_map(|s| s.points.iter())
            .filter(|(x, y)| x.is_finite() && y.is_finite());
        let &(x0, y0) = points.next()?;
        let (mut x_min, mut x_max, mut y_min, mut y_max) = (x0, x0, y0, y0);
        for &(x, y) in points {
            x_min = x_min.min(x);
            x_max = x_max.max(x);
            y_min = y_min.min(y);
            y_max = y_max.max(y);
        }
        if x_max <= x_min {
            x_max = x_min + 1.0;
        }
        if y_max <= y_min {
            y_max = y_min + 1.0;
        }
        Some(((x_min, x_max), (y_min, y_max)))
    }

    /// Draws the chart as an SVG file of `width` x `height` pixels.
    ///
    /// # Errors
    /// No finite point to draw, or the file cannot be written.
    pub fn write_svg(&self, path: &Path, width: u32, height: u32) -> Result<(), PlotError> {
        let ((x_min, x_max), (y_min, y_max)) = self
            .bounds()
            .ok_or_else(|| PlotError::Empty(self.title.clone()))?;
        let draw_error = |e: &dyn std::fmt::Display| PlotError::Draw {
            path: path.display().to_string(),
            message: e.to_string(),
        };
        let root = SVGBackend::new(path, (width, height)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| draw_error(&e))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(&self.title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(56)
            .build_cartesian_2d(x_min..x_max, y_min..y_max)
            .map_err(|e| draw_error(&e))?;
        chart
            .configure_mesh()
            .x_desc(self.x_label.as_str())
            .y_desc(self.y_label.as_str())
            .draw()
            .map_err(|e| draw_error(&e))?;
        for (i, series) in self.series.iter().enumerate() {
            let colour = PALETTE[i % PALETTE.len()];
            chart
                .draw_series(LineSeries::new(
                    series.points.iter().copied(),
                    colour.stroke_width(2),
                ))
                .map_err(|e| draw_error(&e))?
                .label(series.name.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], colour.stroke_width(2)));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(|e| draw_error(&e))?;
        root.present().map_err(|e| draw_error(&e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart(points: Vec<(f64, f64)>) -> LineChart {
        LineChart {
            title: "allocation".into(),
            x_label: "arrived (%)".into(),
            y_label: "allocated (%)".into(),
            series: vec![Series {
                name: "binpack".into(),
                points,
            }],
        }
    }

    #[test]
    fn draws_an_svg_with_its_title_and_legend() {
        let dir = std::env::temp_dir().join(format!("kai-sim-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("chart.svg");
        chart(vec![(0.0, 0.0), (50.0, 48.0), (100.0, 90.0)])
            .write_svg(&path, 640, 400)
            .expect("drawn");
        let svg = std::fs::read_to_string(&path).expect("written");
        assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(80)]);
        assert!(
            svg.contains("allocation") && svg.contains("binpack"),
            "title and legend are in the SVG"
        );
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn a_chart_without_finite_points_is_an_error() {
        let e = chart(vec![(f64::NAN, 1.0)]).write_svg(Path::new("/nonexistent/x.svg"), 10, 10);
        assert!(matches!(e, Err(PlotError::Empty(_))), "{e:?}");
    }

    #[test]
    fn a_flat_series_still_has_a_span() {
        let b = chart(vec![(1.0, 5.0), (1.0, 5.0)]).bounds().expect("points");
        assert_eq!(b, ((1.0, 2.0), (5.0, 6.0)));
    }
}
