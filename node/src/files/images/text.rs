//! Text watermarks: the node's font (a CJK-capable sans-serif from the system, found once) and
//! one line of text drawn into a transparent picture with ab_glyph, for `images::render` to
//! lay on an image.

use ab_glyph::{Font as _, FontVec, PxScale, ScaleFont};
use image::{Rgba, RgbaImage};

/// Fonts looked for, in order: WenQuanYi Micro Hei (Debian `fonts-wqy-microhei`, which
/// `make run` installs) covers Latin, Chinese, Japanese and Korean; the others are fallbacks.
pub const FONT_PATHS: [&str; 4] = [
    "/usr/share/fonts/truetype/wqy/wqy-microhei.ttc",
    "/usr/share/fonts/truetype/wqy/wqy-zenhei.ttc",
    "/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc",
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
];

/// Widest text picture drawn, in pixels.
const MAX_WIDTH: f32 = 16_384.0;

/// A loaded font.
pub struct Font {
    font: FontVec,
    pub path: String,
}

impl Font {
    /// The first of `FONT_PATHS` that loads, or `None` when none is installed.
    pub fn find() -> Option<Font> {
        FONT_PATHS.iter().find_map(|path| {
            let data = std::fs::read(path).ok()?;
            match FontVec::try_from_vec_and_index(data, 0) {
                Ok(font) => Some(Font {
                    font,
                    path: (*path).to_string(),
                }),
                Err(e) => {
                    tracing::warn!(path, "watermark font does not load: {e}");
                    None
                }
            }
        })
    }

    /// `text` on one line, `px` pixels per em, in `fill`, on a transparent picture as tall as
    /// the font's line.
    pub fn draw(&self, text: &str, px: f32, fill: [u8; 3]) -> RgbaImage {
        // ab_glyph scales to the line height (ascent − descent), not to the em.
        let per_em = self.font.units_per_em().unwrap_or(1000.0);
        let scale = PxScale::from(px * self.font.height_unscaled() / per_em);
        let font = self.font.as_scaled(scale);
        let mut glyphs = Vec::new();
        let mut x = 0.0f32;
        let mut last = None;
        for c in text.chars() {
            let id = font.glyph_id(c);
            if let Some(last) = last {
                x += font.kern(last, id);
            }
            if x > MAX_WIDTH {
                break;
            }
            glyphs.push(id.with_scale_and_position(scale, ab_glyph::point(x, font.ascent())));
            x += font.h_advance(id);
            last = Some(id);
        }
        let width = x.ceil().clamp(1.0, MAX_WIDTH) as u32;
        let height = (font.ascent() - font.descent()).ceil().max(1.0) as u32;
        let mut picture =
            RgbaImage::from_pixel(width, height, Rgba([fill[0], fill[1], fill[2], 0]));
        for glyph in glyphs {
            let Some(outline) = self.font.outline_glyph(glyph) else {
                continue;
            };
            let bounds = outline.px_bounds();
            outline.draw(|gx, gy, coverage| {
                let x = bounds.min.x as i64 + i64::from(gx);
                let y = bounds.min.y as i64 + i64::from(gy);
                if x < 0 || y < 0 || x >= i64::from(width) || y >= i64::from(height) {
                    return;
                }
                let pixel = picture.get_pixel_mut(x as u32, y as u32);
                let alpha = (coverage.clamp(0.0, 1.0) * 255.0).round() as u8;
                pixel.0[3] = pixel.0[3].max(alpha);
            });
        }
        picture
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_drawn_at_the_size_asked_for() {
        let Some(font) = Font::find() else {
            panic!("no font of {FONT_PATHS:?} is installed (scripts/install-deps.sh installs one)");
        };
        assert_ne!(
            font.font.glyph_id('你').0,
            0,
            "{} has no Chinese glyphs",
            font.path
        );
        let small = font.draw("Basalt 你好", 12.0, [255, 0, 0]);
        let large = font.draw("Basalt 你好", 48.0, [255, 0, 0]);
        // Four times the em, about four times the picture.
        assert!((large.height() as f32 / small.height() as f32 - 4.0).abs() < 0.5);
        assert!((large.width() as f32 / small.width() as f32 - 4.0).abs() < 0.5);
        // Ink in the fill colour, and the Chinese characters have ink (not blank boxes).
        let inked = |img: &RgbaImage, from: u32| {
            img.enumerate_pixels()
                .filter(|(x, _, p)| *x >= from && p.0[3] > 128)
                .count()
        };
        assert!(inked(&large, 0) > 100);
        assert!(large
            .pixels()
            .filter(|p| p.0[3] > 0)
            .all(|p| p.0[..3] == [255, 0, 0]));
        assert!(
            inked(&large, large.width() * 3 / 4) > 50,
            "CJK glyphs drew nothing"
        );
    }
}
