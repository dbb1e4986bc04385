//! The image operations a file url's query asks for, parsed and checked before a byte of the
//! file is read: `imageView2/<mode>/w/<W>/h/<H>/format/<f>/q/<Q>` (thumbnails and format
//! conversion) and `watermark/1/image/<b64>/...` or `watermark/2/text/<b64>/...`, chained with
//! `|` (decisions/0021). The geometry of a thumbnail (`View::target`) is here too; applying
//! the operations to pixels is `images::render`.

use super::error::ImageError;

/// Largest width or height a thumbnail may ask for, and that an answer may have.
pub const MAX_SIDE: u32 = 9_999;
/// Operations one url may chain.
pub const MAX_STEPS: usize = 4;
/// Longest watermark text, in characters.
pub const MAX_TEXT_CHARS: usize = 200;
/// Largest watermark font size, in twips (1/20 pt): 500 px.
pub const MAX_FONT_TWIPS: u32 = 10_000;

/// An encoding an answer may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Jpeg,
    Png,
    Gif,
    Webp,
}

impl Format {
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Jpeg => "image/jpeg",
            Format::Png => "image/png",
            Format::Gif => "image/gif",
            Format::Webp => "image/webp",
        }
    }
}

/// `imageView2`: a thumbnail of the image (never larger than it), optionally re-encoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    /// 0–5, as in the table of docs/api.md ("Image processing").
    pub mode: u8,
    pub w: Option<u32>,
    pub h: Option<u32>,
    /// The answer's encoding; the source's when `None`.
    pub format: Option<Format>,
    /// JPEG quality, 1–100.
    pub quality: u8,
}

/// Where a watermark sits on the image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gravity {
    NorthWest,
    North,
    NorthEast,
    West,
    Center,
    East,
    SouthWest,
    South,
    SouthEast,
}

/// What a watermark shows.
#[derive(Debug, Clone, PartialEq)]
pub enum Mark {
    /// Another stored file of the same app (its url), its short edge scaled to `ws` times the
    /// image's short edge when given.
    Image { url: String, ws: Option<f32> },
    /// A line of text, `px` pixels per em, in `fill`.
    Text {
        text: String,
        px: f32,
        fill: [u8; 3],
    },
}

/// `watermark/1` (an image) or `watermark/2` (text).
#[derive(Debug, Clone, PartialEq)]
pub struct Watermark {
    pub mark: Mark,
    /// Opacity, 0–100 (100: opaque).
    pub dissolve: u8,
    pub gravity: Gravity,
    /// Distance from the image's edges the gravity names, in pixels.
    pub dx: u32,
    pub dy: u32,
}

/// One step of a pipeline.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    View(View),
    Watermark(Watermark),
}

/// The steps a url asks for, in order.
#[derive(Debug, Clone, PartialEq)]
pub struct Pipeline {
    pub steps: Vec<Op>,
    /// `ignore-error/1`: answer the file unchanged when it cannot be processed.
    pub ignore_error: bool,
}

impl Pipeline {
    /// The steps `query` (a url's raw query string) asks for, or `None` when it asks for no
    /// image operation (an ordinary download).
    pub fn parse(query: &str) -> Result<Option<Pipeline>, ImageError> {
        let query = query.replace("%7C", "|").replace("%7c", "|");
        let first = query.split(['|', '/', '&', '=']).next().unwrap_or("");
        if first != "imageView2" && first != "watermark" {
            return Ok(None);
        }
        let mut pipeline = Pipeline {
            steps: Vec::new(),
            ignore_error: false,
        };
        for step in query.split('|').filter(|s| !s.is_empty()) {
            if pipeline.steps.len() == MAX_STEPS {
                return Err(ImageError::Invalid(format!(
                    "at most {MAX_STEPS} operations may be chained"
                )));
            }
            let mut parts = step.split('/');
            let op = match parts.next() {
                Some("imageView2") => Op::View(view(parts, &mut pipeline.ignore_error)?),
                Some("watermark") => Op::Watermark(watermark(parts)?),
                Some(other) => {
                    return Err(ImageError::Invalid(format!(
                        "unknown image operation {other:?}"
                    )))
                }
                None => continue,
            };
            pipeline.steps.push(op);
        }
        Ok(Some(pipeline))
    }
}

/// The `key/value` pairs after an operation's name and mode.
fn pairs<'a>(mut parts: impl Iterator<Item = &'a str>) -> impl Iterator<Item = (&'a str, &'a str)> {
    std::iter::from_fn(move || {
        let key = parts.next()?;
        Some((key, parts.next().unwrap_or("")))
    })
}

fn view<'a>(
    mut parts: impl Iterator<Item = &'a str>,
    ignore_error: &mut bool,
) -> Result<View, ImageError> {
    let mode = parts.next().unwrap_or("");
    let mode = mode.parse::<u8>().ok().filter(|m| *m <= 5).ok_or_else(|| {
        ImageError::Mode(format!("imageView2 needs a mode from 0 to 5, not {mode:?}"))
    })?;
    // Modes 0, 4 and 5 read w and h as the long and the short edge.
    let edges = matches!(mode, 0 | 4 | 5);
    let mut v = View {
        mode,
        w: None,
        h: None,
        format: None,
        quality: 75,
    };
    for (key, value) in pairs(parts) {
        match key {
            "w" | "h" => {
                let side = value
                    .parse::<u32>()
                    .ok()
                    .filter(|n| (1..=MAX_SIDE).contains(n));
                let Some(side) = side else {
                    let m = format!("{key} must be from 1 to {MAX_SIDE}, not {value:?}");
                    return Err(match (key, edges) {
                        ("w", false) => ImageError::Width(m),
                        ("w", true) => ImageError::LongEdge(m),
                        (_, false) => ImageError::Height(m),
                        (_, true) => ImageError::ShortEdge(m),
                    });
                };
                if key == "w" {
                    v.w = Some(side);
                } else {
                    v.h = Some(side);
                }
            }
            "format" => {
                v.format = Some(match value.to_ascii_lowercase().as_str() {
                    "jpg" | "jpeg" => Format::Jpeg,
                    "png" => Format::Png,
                    "gif" => Format::Gif,
                    "webp" => Format::Webp,
                    _ => {
                        return Err(ImageError::Invalid(format!(
                            "format must be jpg, png, gif or webp, not {value:?}"
                        )))
                    }
                })
            }
            "q" => {
                v.quality = value
                    .trim_end_matches('!')
                    .parse::<u8>()
                    .ok()
                    .filter(|q| (1..=100).contains(q))
                    .ok_or_else(|| {
                        ImageError::Invalid(format!("q must be from 1 to 100, not {value:?}"))
                    })?
            }
            "ignore-error" => *ignore_error = value == "1",
            // Progressive JPEG is not made: the answer is a baseline JPEG.
            "interlace" => {}
            _ => {
                return Err(ImageError::Invalid(format!(
                    "unknown imageView2 parameter {key:?}"
                )))
            }
        }
    }
    if v.w.is_none() && v.h.is_none() {
        let m = "imageView2 needs w or h".to_string();
        return Err(if edges {
            ImageError::LongEdge(m)
        } else {
            ImageError::Width(m)
        });
    }
    Ok(v)
}

/// Text from url-safe base64 (`-` and `_`, padding optional); standard base64 is taken too.
fn base64_text(key: &str, value: &str) -> Result<String, ImageError> {
    use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
    use base64::Engine;
    let trimmed = value.trim_end_matches('=');
    let bytes = URL_SAFE_NO_PAD
        .decode(trimmed)
        .or_else(|_| STANDARD_NO_PAD.decode(trimmed))
        .map_err(|_| {
            ImageError::Invalid(format!("{key} must be url-safe base64, not {value:?}"))
        })?;
    String::from_utf8(bytes)
        .map_err(|_| ImageError::Invalid(format!("{key} must encode UTF-8 text")))
}

fn watermark<'a>(mut parts: impl Iterator<Item = &'a str>) -> Result<Watermark, ImageError> {
    let kind = parts.next().unwrap_or("");
    let (mut url, mut text, mut ws) = (None, None, None);
    let (mut twips, mut fill) = (240u32, [0u8; 3]);
    let mut w = Watermark {
        mark: Mark::Text {
            text: String::new(),
            px: 12.0,
            fill,
        },
        dissolve: 100,
        gravity: Gravity::SouthEast,
        dx: 10,
        dy: 10,
    };
    for (key, value) in pairs(parts) {
        let number = |max: u32| {
            value
                .parse::<u32>()
                .ok()
                .filter(|n| *n <= max)
                .ok_or_else(|| {
                    ImageError::Invalid(format!("{key} must be from 0 to {max}, not {value:?}"))
                })
        };
        match key {
            "image" => url = Some(base64_text(key, value)?),
            "text" => text = Some(base64_text(key, value)?),
            "ws" => {
                ws = Some(
                    value
                        .parse::<f32>()
                        .ok()
                        .filter(|f| *f > 0.0 && *f <= 1.0)
                        .ok_or_else(|| {
                            ImageError::Invalid(format!(
                                "ws must be above 0 and at most 1, not {value:?}"
                            ))
                        })?,
                )
            }
            "fontsize" => twips = number(MAX_FONT_TWIPS)?.max(20),
            "fill" => fill = color(&base64_text(key, value)?)?,
            "dissolve" => w.dissolve = number(100)? as u8,
            "dx" => w.dx = number(MAX_SIDE)?,
            "dy" => w.dy = number(MAX_SIDE)?,
            "gravity" => w.gravity = gravity(value)?,
            // The font is the node's (docs/api.md); `wst` is always the short edge.
            "font" | "wst" => {}
            _ => {
                return Err(ImageError::Invalid(format!(
                    "unknown watermark parameter {key:?}"
                )))
            }
        }
    }
    w.mark = match (kind, url, text) {
        ("1", Some(url), _) => Mark::Image { url, ws },
        ("2", _, Some(text)) => {
            let chars = text.chars().count();
            if chars == 0 || chars > MAX_TEXT_CHARS || text.contains(['\n', '\r']) {
                return Err(ImageError::Invalid(format!(
                    "the watermark text must be one line of 1 to {MAX_TEXT_CHARS} characters"
                )));
            }
            Mark::Text {
                text,
                px: twips as f32 / 20.0,
                fill,
            }
        }
        ("1", None, _) => {
            return Err(ImageError::Invalid(
                "watermark/1 needs image/<base64 url>".into(),
            ))
        }
        ("2", _, None) => {
            return Err(ImageError::Invalid(
                "watermark/2 needs text/<base64 text>".into(),
            ))
        }
        _ => {
            return Err(ImageError::Invalid(format!(
                "the watermark kind must be 1 (image) or 2 (text), not {kind:?}"
            )))
        }
    };
    Ok(w)
}

fn gravity(value: &str) -> Result<Gravity, ImageError> {
    use Gravity::*;
    Ok(match value {
        "NorthWest" => NorthWest,
        "North" => North,
        "NorthEast" => NorthEast,
        "West" => West,
        "Center" => Center,
        "East" => East,
        "SouthWest" => SouthWest,
        "South" => South,
        "SouthEast" => SouthEast,
        _ => return Err(ImageError::Invalid(format!("unknown gravity {value:?}"))),
    })
}

/// A fill colour: `#RRGGBB` or one of a few names.
fn color(value: &str) -> Result<[u8; 3], ImageError> {
    const NAMED: [(&str, [u8; 3]); 8] = [
        ("black", [0, 0, 0]),
        ("white", [255, 255, 255]),
        ("red", [255, 0, 0]),
        ("green", [0, 128, 0]),
        ("blue", [0, 0, 255]),
        ("yellow", [255, 255, 0]),
        ("gray", [128, 128, 128]),
        ("grey", [128, 128, 128]),
    ];
    if let Some((_, rgb)) = NAMED.iter().find(|(n, _)| n.eq_ignore_ascii_case(value)) {
        return Ok(*rgb);
    }
    let bad = || {
        ImageError::Invalid(format!(
            "fill must be #RRGGBB or a colour name, not {value:?}"
        ))
    };
    let hex = value
        .strip_prefix('#')
        .filter(|h| h.len() == 6 && h.bytes().all(|b| b.is_ascii_hexdigit()))
        .ok_or_else(bad)?;
    let byte = |i: usize| u8::from_str_radix(&hex[i..i + 2], 16).map_err(|_| bad());
    Ok([byte(0)?, byte(2)?, byte(4)?])
}

impl View {
    /// The size a `sw`×`sh` image is scaled to (never larger than it), and the size of the
    /// centred crop that follows in modes 1 and 5.
    pub fn target(&self, sw: u32, sh: u32) -> ((u32, u32), Option<(u32, u32)>) {
        let (sw, sh) = (sw.max(1), sh.max(1));
        // The limits on width and height, as the mode reads w and h.
        let (lw, lh) = if matches!(self.mode, 0 | 4 | 5) && sw < sh {
            (self.h, self.w)
        } else {
            (self.w, self.h)
        };
        // Modes 0 and 2 fit inside the box; 1, 3, 4 and 5 cover it.
        let at_most = matches!(self.mode, 0 | 2);
        let (lw, lh) = match (lw, lh) {
            (Some(a), Some(b)) => (a, b),
            (Some(a), None) if at_most => (a, u32::MAX),
            (None, Some(b)) if at_most => (u32::MAX, b),
            (Some(a), None) | (None, Some(a)) => (a, a),
            (None, None) => (sw, sh),
        };
        let (kw, kh) = (f64::from(lw) / f64::from(sw), f64::from(lh) / f64::from(sh));
        let scale = if at_most { kw.min(kh) } else { kw.max(kh) }.min(1.0);
        let scaled = |side: u32| ((f64::from(side) * scale).round() as u32).clamp(1, side);
        let size = (scaled(sw), scaled(sh));
        let crop = matches!(self.mode, 1 | 5).then(|| (lw.min(size.0), lh.min(size.1)));
        (size, crop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(q: &str) -> View {
        match Pipeline::parse(q) {
            Ok(Some(p)) => match &p.steps[..] {
                [Op::View(v)] => v.clone(),
                other => panic!("{q}: {other:?}"),
            },
            other => panic!("{q}: {other:?}"),
        }
    }

    /// The kind of error `q` is refused with: "invalid", or what it names (mode, width, …).
    fn refused(q: &str) -> &'static str {
        match Pipeline::parse(q) {
            Err(ImageError::Invalid(_)) => "invalid",
            Err(ImageError::Mode(_)) => "mode",
            Err(ImageError::Width(_)) => "width",
            Err(ImageError::Height(_)) => "height",
            Err(ImageError::LongEdge(_)) => "long edge",
            Err(ImageError::ShortEdge(_)) => "short edge",
            other => panic!("{q}: {other:?}"),
        }
    }

    #[test]
    fn queries_without_operations_are_downloads() {
        for q in ["", "v=1", "download=1", "imageView", "watermarks/1"] {
            assert_eq!(Pipeline::parse(q).ok(), Some(None), "{q}");
        }
    }

    #[test]
    fn thumbnails_parse_with_defaults() {
        let v = view("imageView2/1/w/200/h/100");
        assert_eq!(
            (v.mode, v.w, v.h, v.format, v.quality),
            (1, Some(200), Some(100), None, 75)
        );
        let v = view("imageView2/2/w/50/format/webp/q/90!");
        assert_eq!(
            (v.w, v.h, v.format, v.quality),
            (Some(50), None, Some(Format::Webp), 90)
        );
        let p = Pipeline::parse("imageView2/2/w/50/ignore-error/1%7Cwatermark/2/text/5L2g5aW9")
            .ok()
            .flatten();
        let p = p.unwrap_or_else(|| panic!("no pipeline"));
        assert!(p.ignore_error);
        assert_eq!(p.steps.len(), 2);
        match &p.steps[1] {
            Op::Watermark(Watermark {
                mark: Mark::Text { text, px, fill },
                dissolve: 100,
                gravity: Gravity::SouthEast,
                dx: 10,
                dy: 10,
            }) => assert_eq!((text.as_str(), *px, *fill), ("你好", 12.0, [0, 0, 0])),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bad_parameters_name_what_is_wrong() {
        for (q, what) in [
            ("imageView2/6/w/10", "mode"),
            ("imageView2/x/w/10", "mode"),
            ("imageView2/1/w/0", "width"),
            ("imageView2/2/w/10000", "width"),
            ("imageView2/3/w/10/h/-1", "height"),
            ("imageView2/1", "width"),
            ("imageView2/0/w/abc", "long edge"),
            ("imageView2/4/h/99999", "short edge"),
            ("imageView2/5", "long edge"),
            ("imageView2/2/w/10/format/bmp", "invalid"),
            ("imageView2/2/w/10/q/101", "invalid"),
            ("imageView2/2/w/10/z/1", "invalid"),
            ("watermark/3/text/YQ", "invalid"),
            ("watermark/2/text/%%%", "invalid"),
            ("watermark/2/fill/I2ZmMDAwMA", "invalid"),
            ("watermark/2/text/YQ/gravity/Up", "invalid"),
            ("watermark/2/text/YQ/fill/I2ZmMDA", "invalid"),
            ("watermark/1/dissolve/50", "invalid"),
            ("imageView2/2/w/10|blur/3", "invalid"),
        ] {
            assert_eq!(refused(q), what, "{q}");
        }
        let five = ["imageView2/2/w/10"; 5].join("|");
        assert_eq!(refused(&five), "invalid");
    }

    #[test]
    fn watermark_parameters() {
        // "#ff0000" and "https://x/a.png" in url-safe base64 without padding.
        let p = Pipeline::parse(
            "watermark/2/text/QmFzYWx0/fontsize/600/fill/I2ZmMDAwMA/dissolve/50/gravity/North/dx/3/dy/4",
        );
        match p.ok().flatten().map(|p| p.steps) {
            Some(steps) => assert_eq!(
                steps,
                vec![Op::Watermark(Watermark {
                    mark: Mark::Text {
                        text: "Basalt".into(),
                        px: 30.0,
                        fill: [255, 0, 0]
                    },
                    dissolve: 50,
                    gravity: Gravity::North,
                    dx: 3,
                    dy: 4,
                })]
            ),
            None => panic!("no pipeline"),
        }
        let p = Pipeline::parse("watermark/1/image/aHR0cHM6Ly94L2EucG5n/ws/0.25");
        match p.ok().flatten().map(|p| p.steps) {
            Some(steps) => assert_eq!(
                steps[0],
                Op::Watermark(Watermark {
                    mark: Mark::Image {
                        url: "https://x/a.png".into(),
                        ws: Some(0.25)
                    },
                    dissolve: 100,
                    gravity: Gravity::SouthEast,
                    dx: 10,
                    dy: 10,
                })
            ),
            None => panic!("no pipeline"),
        }
    }

    fn target(q: &str, sw: u32, sh: u32) -> ((u32, u32), Option<(u32, u32)>) {
        view(q).target(sw, sh)
    }

    #[test]
    fn thumbnail_sizes_follow_each_mode() {
        // 0: long edge ≤ w, short edge ≤ h.
        assert_eq!(
            target("imageView2/0/w/100/h/100", 400, 200),
            ((100, 50), None)
        );
        assert_eq!(target("imageView2/0/w/100", 200, 400), ((50, 100), None));
        assert_eq!(target("imageView2/0/h/50", 200, 400), ((50, 100), None));
        // 1: cover w×h, then a centred crop to w×h.
        assert_eq!(
            target("imageView2/1/w/100/h/100", 400, 200),
            ((200, 100), Some((100, 100)))
        );
        assert_eq!(
            target("imageView2/1/w/100", 400, 200),
            ((200, 100), Some((100, 100)))
        );
        // 2: fit inside w×h; a missing side is unbounded.
        assert_eq!(
            target("imageView2/2/w/100/h/100", 400, 200),
            ((100, 50), None)
        );
        assert_eq!(target("imageView2/2/h/100", 400, 200), ((200, 100), None));
        // 3: cover w×h, no crop.
        assert_eq!(
            target("imageView2/3/w/100/h/100", 400, 200),
            ((200, 100), None)
        );
        // 4: long edge ≥ w, short edge ≥ h.
        assert_eq!(
            target("imageView2/4/w/100/h/80", 400, 200),
            ((160, 80), None)
        );
        assert_eq!(
            target("imageView2/4/w/100/h/80", 200, 400),
            ((80, 160), None)
        );
        // 5: as 4, then a centred crop to long×short.
        assert_eq!(
            target("imageView2/5/w/100/h/80", 400, 200),
            ((160, 80), Some((100, 80)))
        );
        assert_eq!(
            target("imageView2/5/w/100/h/80", 200, 400),
            ((80, 160), Some((80, 100)))
        );
        // Never larger than the image.
        assert_eq!(
            target("imageView2/2/w/1000/h/1000", 40, 20),
            ((40, 20), None)
        );
        assert_eq!(
            target("imageView2/1/w/100/h/100", 40, 20),
            ((40, 20), Some((40, 20)))
        );
        assert_eq!(target("imageView2/2/w/1", 9000, 1), ((1, 1), None));
    }
}
