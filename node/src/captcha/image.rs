//! Draws a captcha's text into a PNG: a 5×7 bitmap font scaled to the image, each character
//! sheared and shifted at random, over a tinted background with noise lines and dots. The same
//! seed draws the same picture, so a captcha record keeps only its text and seed.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The characters a captcha uses: no 0/O, 1/I/L that people confuse.
pub const ALPHABET: &str = "23456789ABCDEFGHJKMNPQRSTUVWXYZ";

/// 5×7 glyphs of `ALPHABET`, in its order: seven rows of five bits, most significant left.
const GLYPHS: [[u8; 7]; 31] = [
    [0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F], // 2
    [0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E], // 3
    [0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02], // 4
    [0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E], // 5
    [0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E], // 6
    [0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08], // 7
    [0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E], // 8
    [0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C], // 9
    [0x0E, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11], // A
    [0x1E, 0x11, 0x11, 0x1E, 0x11, 0x11, 0x1E], // B
    [0x0E, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0E], // C
    [0x1C, 0x12, 0x11, 0x11, 0x11, 0x12, 0x1C], // D
    [0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x1F], // E
    [0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x10], // F
    [0x0E, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0F], // G
    [0x11, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11], // H
    [0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0C], // J
    [0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11], // K
    [0x11, 0x1B, 0x15, 0x15, 0x11, 0x11, 0x11], // M
    [0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11], // N
    [0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10, 0x10], // P
    [0x0E, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0D], // Q
    [0x1E, 0x11, 0x11, 0x1E, 0x14, 0x12, 0x11], // R
    [0x0F, 0x10, 0x10, 0x0E, 0x01, 0x01, 0x1E], // S
    [0x1F, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04], // T
    [0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E], // U
    [0x11, 0x11, 0x11, 0x11, 0x11, 0x0A, 0x04], // V
    [0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0A], // W
    [0x11, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x11], // X
    [0x11, 0x11, 0x0A, 0x04, 0x04, 0x04, 0x04], // Y
    [0x1F, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1F], // Z
];

fn glyph(c: char) -> Option<&'static [u8; 7]> {
    ALPHABET.chars().position(|a| a == c).map(|i| &GLYPHS[i])
}

/// A random captcha text of `len` characters of `ALPHABET`.
pub fn random_text(len: usize) -> String {
    let chars: Vec<char> = ALPHABET.chars().collect();
    let mut rng = rand::rng();
    (0..len)
        .map(|_| chars[rng.random_range(0..chars.len())])
        .collect()
}

struct Canvas {
    width: usize,
    height: usize,
    rgb: Vec<u8>,
}

impl Canvas {
    fn set(&mut self, x: i64, y: i64, color: [u8; 3]) {
        if x >= 0 && y >= 0 && (x as usize) < self.width && (y as usize) < self.height {
            let i = (y as usize * self.width + x as usize) * 3;
            self.rgb[i..i + 3].copy_from_slice(&color);
        }
    }

    fn line(&mut self, (x0, y0): (i64, i64), (x1, y1): (i64, i64), color: [u8; 3]) {
        let steps = (x1 - x0).abs().max((y1 - y0).abs()).max(1);
        for s in 0..=steps {
            let x = x0 + (x1 - x0) * s / steps;
            let y = y0 + (y1 - y0) * s / steps;
            self.set(x, y, color);
        }
    }
}

fn dark(rng: &mut StdRng) -> [u8; 3] {
    [
        rng.random_range(0..120),
        rng.random_range(0..120),
        rng.random_range(0..140),
    ]
}

/// The text drawn into a `width`×`height` PNG.
pub fn render_png(text: &str, width: u32, height: u32, seed: u64) -> Result<Vec<u8>, String> {
    let mut rng = StdRng::seed_from_u64(seed);
    let (w, h) = (width as usize, height as usize);
    let bg = [
        rng.random_range(215..=255),
        rng.random_range(215..=255),
        rng.random_range(215..=255),
    ];
    let mut canvas = Canvas {
        width: w,
        height: h,
        rgb: bg.iter().copied().cycle().take(w * h * 3).collect(),
    };
    let chars: Vec<char> = text.chars().collect();
    let cell = w as f64 / chars.len().max(1) as f64;
    let sx = cell * 0.72 / 5.0;
    let sy = h as f64 * 0.72 / 7.0;
    for (i, c) in chars.iter().enumerate() {
        let Some(g) = glyph(*c) else { continue };
        let color = dark(&mut rng);
        let x0 = i as f64 * cell + cell * 0.14 + rng.random_range(-0.08..0.08) * cell;
        let y0 = (h as f64 - 7.0 * sy) / 2.0 + rng.random_range(-0.12..0.12) * h as f64;
        let shear = rng.random_range(-0.35..0.35);
        let mid = 3.5 * sy;
        let (left, right) = ((x0 - cell * 0.3) as i64, (x0 + cell * 1.1) as i64);
        for py in (y0 as i64)..=((y0 + 7.0 * sy) as i64) {
            for px in left..=right {
                let dy = py as f64 - y0;
                let gy = dy / sy;
                let gx = (px as f64 - x0 - shear * (dy - mid)) / sx;
                if !(0.0..7.0).contains(&gy) || !(0.0..5.0).contains(&gx) {
                    continue;
                }
                if g[gy as usize] & (0x10 >> gx as usize) != 0 {
                    canvas.set(px, py, color);
                }
            }
        }
    }
    for _ in 0..rng.random_range(2..=4) {
        let a = (rng.random_range(0..w as i64), rng.random_range(0..h as i64));
        let b = (rng.random_range(0..w as i64), rng.random_range(0..h as i64));
        let color = dark(&mut rng);
        canvas.line(a, b, color);
    }
    for _ in 0..(w * h / 25) {
        let (x, y) = (rng.random_range(0..w as i64), rng.random_range(0..h as i64));
        let color = dark(&mut rng);
        canvas.set(x, y, color);
    }
    let mut out = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut out, width, height);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        let mut writer = enc.write_header().map_err(|e| e.to_string())?;
        writer
            .write_image_data(&canvas.rgb)
            .map_err(|e| e.to_string())?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_character_has_a_glyph_with_ink() {
        for c in ALPHABET.chars() {
            let g = glyph(c).unwrap();
            assert!(g.iter().all(|row| *row < 0x20), "{c}: five columns");
            assert!(g.iter().map(|r| r.count_ones()).sum::<u32>() >= 8, "{c}");
        }
        let distinct: std::collections::HashSet<_> = GLYPHS.iter().collect();
        assert_eq!(distinct.len(), GLYPHS.len());
    }

    #[test]
    fn the_png_decodes_to_the_asked_size_and_is_repeatable() {
        let png_bytes = render_png("AB34", 85, 30, 7).unwrap();
        assert_eq!(png_bytes, render_png("AB34", 85, 30, 7).unwrap());
        assert_ne!(png_bytes, render_png("AB35", 85, 30, 7).unwrap());
        let decoder = png::Decoder::new(std::io::Cursor::new(png_bytes));
        let mut reader = decoder.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut buf).unwrap();
        assert_eq!((info.width, info.height), (85, 30));
        // Ink: a good share of pixels is dark (text, lines, dots), most are background.
        let px = buf[..info.buffer_size()].chunks(3);
        let dark = px.filter(|p| p.iter().all(|&c| c < 150)).count();
        let total = 85 * 30;
        assert!(
            dark > total / 20 && dark < total / 2,
            "{dark} dark of {total}"
        );
    }

    #[test]
    fn text_uses_the_alphabet() {
        let t = random_text(6);
        assert_eq!(t.chars().count(), 6);
        assert!(t.chars().all(|c| ALPHABET.contains(c)));
    }
}
