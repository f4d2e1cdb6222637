//! Text for bitmap charts: a drawing backend that wraps another and draws
//! text itself with `ab_glyph`, placing each glyph at its own bearing.
//!
//! plotters' `ab_glyph` text drawing puts every glyph's bounding box at the
//! pen position, ignoring the glyph's left side bearing, so narrow glyphs
//! drift left and `10.0.0.1` reads `1 0 .0 .0 .1`. Everything but text is
//! passed to the wrapped backend unchanged.

use ab_glyph::{point, Font, FontRef, PxScale, ScaleFont};
use plotters_backend::text_anchor::{HPos, VPos};
use plotters_backend::{
    BackendColor, BackendCoord, BackendStyle, BackendTextStyle, DrawingBackend, DrawingErrorKind,
};

/// A backend that draws text with a given font and everything else with
/// the backend it wraps.
pub struct TextBackend<B> {
    /// The backend everything is drawn on.
    inner: B,
    /// The font all text is drawn in.
    font: FontRef<'static>,
}

impl<B> TextBackend<B> {
    /// Wraps `inner`, drawing text in `font`.
    pub fn new(inner: B, font: FontRef<'static>) -> Self {
        Self { inner, font }
    }

    /// The pen advance of each character of `text` at `size` pixels (the
    /// font's ascent-to-descent height), kerning included, and the total
    /// width.
    fn layout(&self, text: &str, size: f32) -> (Vec<(char, f32)>, f32) {
        let font = self.font.as_scaled(PxScale::from(size));
        let mut caret = 0.0;
        let mut prev = None;
        let mut glyphs = Vec::with_capacity(text.len());
        for c in text.chars() {
            let id = font.glyph_id(c);
            if let Some(prev) = prev {
                caret += font.kern(prev, id);
            }
            glyphs.push((c, caret));
            caret += font.h_advance(id);
            prev = Some(id);
        }
        (glyphs, caret)
    }
}

/// Rounds a non-negative pixel extent up to whole pixels.
fn whole(pixels: f32) -> u32 {
    // Saturating float-to-int conversion: NaN and negatives become 0.
    pixels.max(0.0).ceil() as u32
}

impl<B: DrawingBackend> DrawingBackend for TextBackend<B> {
    type ErrorType = B::ErrorType;

    fn get_size(&self) -> (u32, u32) {
        self.inner.get_size()
    }

    fn ensure_prepared(&mut self) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.inner.ensure_prepared()
    }

    fn present(&mut self) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.inner.present()
    }

    fn draw_pixel(
        &mut self,
        point: BackendCoord,
        color: BackendColor,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.inner.draw_pixel(point, color)
    }

    fn draw_line<S: BackendStyle>(
        &mut self,
        from: BackendCoord,
        to: BackendCoord,
        style: &S,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.inner.draw_line(from, to, style)
    }

    fn draw_rect<S: BackendStyle>(
        &mut self,
        upper_left: BackendCoord,
        bottom_right: BackendCoord,
        style: &S,
        fill: bool,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.inner.draw_rect(upper_left, bottom_right, style, fill)
    }

    fn draw_path<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        path: I,
        style: &S,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.inner.draw_path(path, style)
    }

    fn draw_circle<S: BackendStyle>(
        &mut self,
        center: BackendCoord,
        radius: u32,
        style: &S,
        fill: bool,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.inner.draw_circle(center, radius, style, fill)
    }

    fn fill_polygon<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        vert: I,
        style: &S,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.inner.fill_polygon(vert, style)
    }

    fn blit_bitmap(
        &mut self,
        pos: BackendCoord,
        size: (u32, u32),
        src: &[u8],
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.inner.blit_bitmap(pos, size, src)
    }

    fn estimate_text_size<TStyle: BackendTextStyle>(
        &self,
        text: &str,
        style: &TStyle,
    ) -> Result<(u32, u32), DrawingErrorKind<Self::ErrorType>> {
        let size = style.size() as f32;
        let (_, width) = self.layout(text, size);
        Ok((whole(width), whole(size)))
    }

    fn draw_text<TStyle: BackendTextStyle>(
        &mut self,
        text: &str,
        style: &TStyle,
        pos: BackendCoord,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        let color = style.color();
        if color.alpha == 0.0 {
            return Ok(());
        }
        let size = style.size() as f32;
        let (glyphs, width) = self.layout(text, size);
        let (width, height) = (whole(width) as i32, whole(size) as i32);
        let anchor = style.anchor();
        let dx = match anchor.h_pos {
            HPos::Left => 0,
            HPos::Right => -width,
            HPos::Center => -width / 2,
        };
        let dy = match anchor.v_pos {
            VPos::Top => 0,
            VPos::Center => -height / 2,
            VPos::Bottom => -height,
        };
        let transform = style.transform();
        let font = self.font.as_scaled(PxScale::from(size));
        let baseline = font.ascent();
        let mut pixels = Vec::new();
        for (c, x) in glyphs {
            let mut glyph = font.scaled_glyph(c);
            glyph.position = point(x, baseline);
            if let Some(outline) = font.outline_glyph(glyph) {
                let bounds = outline.px_bounds();
                let (left, top) = (bounds.min.x as i32, bounds.min.y as i32);
                outline.draw(|gx, gy, coverage| {
                    if coverage > 0.0 {
                        let x = left.saturating_add_unsigned(gx);
                        let y = top.saturating_add_unsigned(gy);
                        pixels.push((x, y, coverage.min(1.0)));
                    }
                });
            }
        }
        for (x, y, coverage) in pixels {
            let (x, y) = transform.transform(x + dx, y + dy);
            let point = (pos.0.saturating_add(x), pos.1.saturating_add(y));
            let shade = BackendColor {
                alpha: color.alpha * f64::from(coverage),
                rgb: color.rgb,
            };
            self.inner.draw_pixel(point, shade)?;
        }
        Ok(())
    }
}
