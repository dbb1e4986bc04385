//! Applying a parsed pipeline (`images::ops`) to an image's bytes: decode within bounds (EXIF
//! orientation applied), scale and crop, lay watermarks (`images::text` draws text ones), and
//! encode. Pure CPU work on bytes already read; `images` runs it off the async threads.

use std::io::Cursor;

use image::imageops::{self, FilterType};
use image::{DynamicImage, ImageDecoder, ImageFormat, ImageReader, Limits, Rgba, RgbaImage};

use super::error::ImageError;
use super::ops::{Format, Gravity, Mark, Op, Pipeline, View, Watermark};
use super::text::Font;

/// Largest width or height of an image that is processed.
pub const MAX_SOURCE_SIDE: u32 = 30_000;
/// Largest image processed, in pixels.
pub const MAX_SOURCE_PIXELS: u64 = 50_000_000;
/// Most memory a decoder may take for one image.
const MAX_DECODE_BYTES: u64 = 256 * 1024 * 1024;

/// A processed image: its bytes and their type.
#[derive(Debug, Clone)]
pub struct Rendered {
    pub bytes: bytes::Bytes,
    pub format: Format,
}

/// The pictures and font a pipeline's watermarks need, fetched before it runs.
pub struct Marks<'a> {
    /// The bytes of each `watermark/1` image, in the order of the pipeline's image marks.
    pub images: Vec<bytes::Bytes>,
    pub font: Option<&'a Font>,
}

/// Runs `pipeline` on the image `source`.
pub fn run(source: &[u8], pipeline: &Pipeline, marks: &Marks<'_>) -> Result<Rendered, ImageError> {
    let (mut img, source_format) = decode(source)?;
    let mut format = source_format;
    let mut quality = 75;
    let mut mark_images = marks.images.iter();
    for step in &pipeline.steps {
        match step {
            Op::View(view) => {
                img = thumbnail(&img, view);
                format = view.format.unwrap_or(format);
                quality = view.quality;
            }
            Op::Watermark(w) => {
                let mark = match &w.mark {
                    Mark::Image { ws, .. } => {
                        let bytes = mark_images.next().ok_or_else(|| {
                            ImageError::Invalid("the watermark image was not read".into())
                        })?;
                        let (mark, _) = decode(bytes)?;
                        scaled_mark(mark.to_rgba8(), &img, *ws)
                    }
                    Mark::Text { text, px, fill } => {
                        let font = marks.font.ok_or(ImageError::NoFont)?;
                        font.draw(text, *px, *fill)
                    }
                };
                lay(&mut img, mark, w);
            }
        }
    }
    let bytes = encode(&img, format, quality)?;
    Ok(Rendered {
        bytes: bytes.into(),
        format,
    })
}

/// Decodes `bytes` within the size bounds, turned upright as its EXIF orientation says.
pub fn decode(bytes: &[u8]) -> Result<(DynamicImage, Format), ImageError> {
    let not_image = |e: &dyn std::fmt::Display| ImageError::NotAnImage(e.to_string());
    let mut reader = ImageReader::new(Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|e| not_image(&e))?;
    let format = match reader.format() {
        Some(ImageFormat::Jpeg) => Format::Jpeg,
        Some(ImageFormat::Png) => Format::Png,
        Some(ImageFormat::Gif) => Format::Gif,
        Some(ImageFormat::WebP) => Format::Webp,
        _ => {
            return Err(ImageError::NotAnImage(
                "only JPEG, PNG, GIF and WebP images can be processed".into(),
            ))
        }
    };
    let mut limits = Limits::default();
    limits.max_image_width = Some(MAX_SOURCE_SIDE);
    limits.max_image_height = Some(MAX_SOURCE_SIDE);
    limits.max_alloc = Some(MAX_DECODE_BYTES);
    reader.limits(limits);
    let mut decoder = reader.into_decoder().map_err(|e| decode_error(&e))?;
    let (w, h) = decoder.dimensions();
    if u64::from(w) * u64::from(h) > MAX_SOURCE_PIXELS {
        return Err(ImageError::TooLarge(format!(
            "a {w}×{h} image is larger than {MAX_SOURCE_PIXELS} pixels"
        )));
    }
    let orientation = decoder.orientation().ok();
    let mut img = DynamicImage::from_decoder(decoder).map_err(|e| decode_error(&e))?;
    if let Some(orientation) = orientation {
        img.apply_orientation(orientation);
    }
    Ok((img, format))
}

fn decode_error(e: &image::ImageError) -> ImageError {
    match e {
        image::ImageError::Limits(_) => ImageError::TooLarge(format!(
            "the image is larger than {MAX_SOURCE_SIDE} pixels a side or {} MiB decoded",
            MAX_DECODE_BYTES >> 20
        )),
        other => ImageError::NotAnImage(other.to_string()),
    }
}

fn thumbnail(img: &DynamicImage, view: &View) -> DynamicImage {
    let ((w, h), crop) = view.target(img.width(), img.height());
    let scaled = if (w, h) == (img.width(), img.height()) {
        img.clone()
    } else {
        img.resize_exact(w, h, FilterType::Triangle)
    };
    match crop {
        Some((cw, ch)) if (cw, ch) != (w, h) => scaled.crop_imm((w - cw) / 2, (h - ch) / 2, cw, ch),
        _ => scaled,
    }
}

/// A watermark picture scaled so its short edge is `ws` times the image's short edge.
fn scaled_mark(mark: RgbaImage, img: &DynamicImage, ws: Option<f32>) -> RgbaImage {
    let Some(ws) = ws else {
        return mark;
    };
    let target = (img.width().min(img.height()) as f32 * ws).round().max(1.0);
    let (mw, mh) = (mark.width().max(1) as f32, mark.height().max(1) as f32);
    // Its short edge to the target, but never larger than the image.
    let k = (target / mw.min(mh))
        .min(img.width() as f32 / mw)
        .min(img.height() as f32 / mh);
    let (w, h) = (
        ((mw * k).round() as u32).max(1),
        ((mh * k).round() as u32).max(1),
    );
    imageops::resize(&mark, w, h, FilterType::Triangle)
}

/// Lays `mark` on `img` where the watermark's gravity and margins say, `dissolve` % opaque.
fn lay(img: &mut DynamicImage, mut mark: RgbaImage, w: &Watermark) {
    if w.dissolve < 100 {
        for Rgba([_, _, _, a]) in mark.pixels_mut() {
            *a = (u16::from(*a) * u16::from(w.dissolve) / 100) as u8;
        }
    }
    let (iw, ih) = (i64::from(img.width()), i64::from(img.height()));
    let (mw, mh) = (i64::from(mark.width()), i64::from(mark.height()));
    let (dx, dy) = (i64::from(w.dx), i64::from(w.dy));
    use Gravity::*;
    let x = match w.gravity {
        NorthWest | West | SouthWest => dx,
        North | Center | South => (iw - mw) / 2,
        NorthEast | East | SouthEast => iw - mw - dx,
    };
    let y = match w.gravity {
        NorthWest | North | NorthEast => dy,
        West | Center | East => (ih - mh) / 2,
        SouthWest | South | SouthEast => ih - mh - dy,
    };
    let mut base = img.to_rgba8();
    imageops::overlay(&mut base, &mark, x, y);
    *img = if img.color().has_alpha() {
        DynamicImage::ImageRgba8(base)
    } else {
        DynamicImage::ImageRgb8(DynamicImage::ImageRgba8(base).to_rgb8())
    };
}

fn encode(img: &DynamicImage, format: Format, quality: u8) -> Result<Vec<u8>, ImageError> {
    let mut out = Cursor::new(Vec::new());
    let encoded = match format {
        Format::Jpeg => {
            // JPEG has no transparency: transparent parts become white.
            let flat = if img.color().has_alpha() {
                let mut white = RgbaImage::from_pixel(img.width(), img.height(), Rgba([255; 4]));
                imageops::overlay(&mut white, &img.to_rgba8(), 0, 0);
                DynamicImage::ImageRgba8(white).to_rgb8()
            } else {
                img.to_rgb8()
            };
            let encoder = image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, quality);
            DynamicImage::ImageRgb8(flat).write_with_encoder(encoder)
        }
        Format::Png => img.write_to(&mut out, ImageFormat::Png),
        Format::Gif => {
            DynamicImage::ImageRgba8(img.to_rgba8()).write_to(&mut out, ImageFormat::Gif)
        }
        Format::Webp => {
            let img = if img.color().has_alpha() {
                DynamicImage::ImageRgba8(img.to_rgba8())
            } else {
                DynamicImage::ImageRgb8(img.to_rgb8())
            };
            img.write_to(&mut out, ImageFormat::WebP)
        }
    };
    encoded.map_err(|e| ImageError::Encode(e.to_string()))?;
    Ok(out.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use image::Rgb;

    fn png(w: u32, h: u32) -> Vec<u8> {
        let img =
            image::RgbImage::from_fn(w, h, |x, y| Rgb([(x % 256) as u8, (y % 256) as u8, 128]));
        let mut out = Cursor::new(Vec::new());
        let written = DynamicImage::ImageRgb8(img).write_to(&mut out, ImageFormat::Png);
        assert!(written.is_ok());
        out.into_inner()
    }

    fn pipeline(q: &str) -> Pipeline {
        match Pipeline::parse(q) {
            Ok(Some(p)) => p,
            other => panic!("{q}: {other:?}"),
        }
    }

    fn render(source: &[u8], q: &str) -> (DynamicImage, Format) {
        let marks = Marks {
            images: Vec::new(),
            font: None,
        };
        let out = match run(source, &pipeline(q), &marks) {
            Ok(out) => out,
            Err(e) => panic!("{q}: {e}"),
        };
        match decode(&out.bytes) {
            Ok((img, format)) => {
                assert_eq!(format, out.format);
                (img, format)
            }
            Err(e) => panic!("{q}: {e}"),
        }
    }

    #[test]
    fn thumbnails_have_the_sizes_asked_for_in_each_format() {
        let src = png(400, 200);
        for (q, size, format) in [
            ("imageView2/2/w/100/h/100", (100, 50), Format::Png),
            (
                "imageView2/1/w/100/h/100/format/jpg/q/60",
                (100, 100),
                Format::Jpeg,
            ),
            (
                "imageView2/5/w/100/h/80/format/webp",
                (100, 80),
                Format::Webp,
            ),
            ("imageView2/0/w/40/format/gif", (40, 20), Format::Gif),
            ("imageView2/2/w/4000", (400, 200), Format::Png),
        ] {
            let (img, got) = render(&src, q);
            assert_eq!(((img.width(), img.height()), got), (size, format), "{q}");
        }
    }

    #[test]
    fn steps_chain_in_order() {
        let (img, format) = render(
            &png(400, 200),
            "imageView2/2/w/200|imageView2/1/w/50/h/50/format/jpg",
        );
        assert_eq!((img.width(), img.height(), format), (50, 50, Format::Jpeg));
    }

    #[test]
    fn bytes_that_are_not_an_image_are_refused() {
        let marks = Marks {
            images: Vec::new(),
            font: None,
        };
        let e = run(b"hello, world", &pipeline("imageView2/2/w/10"), &marks);
        assert!(matches!(e, Err(ImageError::NotAnImage(_))), "{e:?}");
        let mut truncated = png(64, 64);
        truncated.truncate(80);
        let e = run(&truncated, &pipeline("imageView2/2/w/10"), &marks);
        assert!(matches!(e, Err(ImageError::NotAnImage(_))), "{e:?}");
    }

    #[test]
    fn a_header_claiming_a_huge_image_is_refused_before_decoding() {
        // A PNG header that claims 30000×30000 pixels (900 Mpx) over a few bytes of data.
        let mut header = Vec::new();
        {
            let mut encoder = png::Encoder::new(&mut header, 30_000, 30_000);
            encoder.set_color(png::ColorType::Rgb);
            let writer = encoder.write_header();
            // The first bytes of a zlib stream: the decoder gets as far as the pixel data.
            let idat =
                writer.and_then(|mut w| w.write_chunk(png::chunk::IDAT, &[0x78, 0x9c, 0x63, 0x00]));
            assert!(idat.is_ok());
        }
        let marks = Marks {
            images: Vec::new(),
            font: None,
        };
        let e = run(&header, &pipeline("imageView2/2/w/10"), &marks);
        assert!(matches!(e, Err(ImageError::TooLarge(_))), "{e:?}");
    }

    #[test]
    fn image_watermarks_are_laid_where_gravity_says() {
        let base = png(200, 100);
        // A 20×10 opaque red mark.
        let mut red = Cursor::new(Vec::new());
        let mark = RgbaImage::from_pixel(20, 10, Rgba([255, 0, 0, 255]));
        assert!(DynamicImage::ImageRgba8(mark)
            .write_to(&mut red, ImageFormat::Png)
            .is_ok());
        let marks = Marks {
            images: vec![red.into_inner().into()],
            font: None,
        };
        // "https://x/a.png"
        let q = "watermark/1/image/aHR0cHM6Ly94L2EucG5n/gravity/NorthWest/dx/5/dy/5";
        let out = run(&base, &pipeline(q), &marks);
        let img = match out.map(|o| decode(&o.bytes)) {
            Ok(Ok((img, _))) => img.to_rgb8(),
            other => panic!("{other:?}"),
        };
        assert_eq!(img.get_pixel(5, 5), &Rgb([255, 0, 0]));
        assert_eq!(img.get_pixel(24, 14), &Rgb([255, 0, 0]));
        assert_ne!(img.get_pixel(25, 15), &Rgb([255, 0, 0]));
        assert_ne!(img.get_pixel(4, 4), &Rgb([255, 0, 0]));
    }
}
