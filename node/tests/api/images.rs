//! Image processing on stored files (issue 15): thumbnails in each mode and format,
//! pipelines, text and image watermarks, the coded errors of bad parameters and of files that
//! cannot be processed, `ignore-error`, caching (a result computed once per node, even when
//! requests race for it), and decompression bombs refused without harm to the node. Video
//! snapshots (`/2/cdnVedioSnapshot`) from a video the test makes with ffmpeg.

use std::io::Cursor;

use basalt_client::{Client, Method};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use image::{DynamicImage, ImageFormat, Rgb, RgbImage, Rgba, RgbaImage};
use serde_json::Value;

use crate::common::{assert_api_error, TestCluster};

fn encoded(img: DynamicImage, format: ImageFormat) -> Vec<u8> {
    let mut out = Cursor::new(Vec::new());
    img.write_to(&mut out, format).expect("encode");
    out.into_inner()
}

/// A `w`×`h` picture with a gradient (so that scaling has something to blend).
fn gradient(w: u32, h: u32) -> DynamicImage {
    DynamicImage::ImageRgb8(RgbImage::from_fn(w, h, |x, y| {
        Rgb([(x * 255 / w) as u8, (y * 255 / h) as u8, 100])
    }))
}

async fn upload(c: &Client, name: &str, bytes: Vec<u8>) -> String {
    let body = c
        .upload_file(name, "application/octet-stream", bytes)
        .await
        .expect("upload")
        .body;
    body["url"].as_str().expect("url").to_string()
}

/// GET of `url` with the image query `q`: status, content type, body.
async fn get(url: &str, q: &str) -> (u16, String, Vec<u8>) {
    let r = reqwest::get(format!("{url}?{q}")).await.expect("GET");
    let status = r.status().as_u16();
    let content_type = r
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap_or("").to_string())
        .unwrap_or_default();
    (
        status,
        content_type,
        r.bytes().await.expect("body").to_vec(),
    )
}

/// The processed image of `url?q`, decoded, and its content type.
async fn processed(url: &str, q: &str) -> (DynamicImage, String) {
    let (status, content_type, body) = get(url, q).await;
    assert_eq!(status, 200, "{q}: {}", String::from_utf8_lossy(&body));
    let img = image::load_from_memory(&body).unwrap_or_else(|e| panic!("{q}: {e}"));
    (img, content_type)
}

/// Asserts `url?q` answers 400 with `code`.
async fn refused(url: &str, q: &str, code: i64) {
    let (status, _, body) = get(url, q).await;
    let body: Value = serde_json::from_slice(&body).expect("json error");
    assert_eq!(
        (status, body["code"].as_i64()),
        (400, Some(code)),
        "{q}: {body}"
    );
}

fn b64(s: &str) -> String {
    URL_SAFE_NO_PAD.encode(s)
}

/// A counter of `/metrics` on node `i`.
async fn counter(cluster: &TestCluster, i: usize, name: &str) -> u64 {
    let text = reqwest::get(format!("http://{}/metrics", cluster.nodes[i].http))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("metrics text");
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

/// Table — each `imageView2` mode, format, bound and pipeline with the size and type it
/// must give; then a portrait's modes, transparency in a JPEG, and the download left whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thumbnails_have_the_size_and_format_asked_for() {
    let cluster = TestCluster::start(1, &[], &[]).await;
    let c = cluster.client(0);
    let photo = upload(
        &c,
        "photo.jpg",
        encoded(gradient(400, 300), ImageFormat::Jpeg),
    )
    .await;

    for (q, size, content_type) in [
        // Cover 100×100, then a centred crop to it.
        ("imageView2/1/w/100/h/100", (100, 100), "image/jpeg"),
        // Fit inside 100×100.
        (
            "imageView2/2/w/100/h/100/format/png",
            (100, 75),
            "image/png",
        ),
        // Long edge at most 200.
        ("imageView2/0/w/200/format/webp", (200, 150), "image/webp"),
        // Cover 100×100 without crop.
        (
            "imageView2/3/w/100/h/100/format/gif",
            (133, 100),
            "image/gif",
        ),
        // Long edge ≥ 100, short edge ≥ 100, cropped to 100×100... as long×short.
        ("imageView2/5/w/120/h/90", (120, 90), "image/jpeg"),
        ("imageView2/4/w/120/h/60/q/30", (120, 90), "image/jpeg"),
        // Never larger than the picture.
        ("imageView2/2/w/4000/h/4000", (400, 300), "image/jpeg"),
        // Other parameters after `&` are not operations.
        ("imageView2/2/w/100/h/100&v=3", (100, 75), "image/jpeg"),
        // A pipeline, with the `|` escaped as browsers send it.
        (
            "imageView2/2/w/200%7CimageView2/1/w/50/h/50/format/png",
            (50, 50),
            "image/png",
        ),
    ] {
        let (img, got_type) = processed(&photo, q).await;
        assert_eq!(
            ((img.width(), img.height()), got_type.as_str()),
            (size, content_type),
            "{q}"
        );
    }

    // A portrait photo: modes 0, 4 and 5 read w and h as the long and the short edge.
    let portrait = upload(
        &c,
        "tall.png",
        encoded(gradient(300, 600), ImageFormat::Png),
    )
    .await;
    let (img, content_type) = processed(&portrait, "imageView2/0/w/200").await;
    assert_eq!(
        (img.width(), img.height(), content_type.as_str()),
        (100, 200, "image/png")
    );
    let (img, _) = processed(&portrait, "imageView2/5/w/100/h/80").await;
    assert_eq!((img.width(), img.height()), (80, 100));

    // Transparency becomes white in a JPEG.
    let clear = RgbaImage::from_pixel(40, 40, Rgba([0, 0, 0, 0]));
    let clear = upload(
        &c,
        "clear.png",
        encoded(DynamicImage::ImageRgba8(clear), ImageFormat::Png),
    )
    .await;
    let (img, _) = processed(&clear, "imageView2/2/w/20/format/jpg").await;
    let p = img.to_rgb8().get_pixel(10, 10).0;
    assert!(p.iter().all(|c| *c > 245), "{p:?}");

    // The ordinary download is untouched; a query that asks for no operation is one.
    let whole = reqwest::get(format!("{photo}?v=2")).await.unwrap();
    assert_eq!(whole.headers()["content-type"], "image/jpeg");
    let bytes = whole.bytes().await.unwrap();
    assert_eq!(image::load_from_memory(&bytes).unwrap().width(), 400);
}

/// A one-node cluster with a white 300×200 picture and a red 20×20 mark stored by its app;
/// their urls, the app's client, and the red picture.
async fn marked() -> (TestCluster, Client, String, String, DynamicImage) {
    let cluster = TestCluster::start(1, &[], &[]).await;
    let c = cluster.client(0);
    let white = DynamicImage::ImageRgb8(RgbImage::from_pixel(300, 200, Rgb([255, 255, 255])));
    let base = upload(&c, "white.png", encoded(white, ImageFormat::Png)).await;
    let red = DynamicImage::ImageRgb8(RgbImage::from_pixel(20, 20, Rgb([255, 0, 0])));
    let mark = upload(&c, "mark.png", encoded(red.clone(), ImageFormat::Png)).await;
    (cluster, c, base, mark, red)
}

fn is_red(p: &Rgb<u8>) -> bool {
    p.0[0] > 200 && p.0[1] < 60 && p.0[2] < 60
}

/// Text watermarks: Chinese and Latin text in red, 40 px, in the bottom right corner with
/// 10 px margins and nowhere else; half-transparent text is pink, not red.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn text_watermarks_are_drawn_where_and_how_they_are_asked() {
    let (_cluster, _c, base, _mark, _red) = marked().await;
    let q = format!(
        "watermark/2/text/{}/fill/{}/fontsize/800/gravity/SouthEast",
        b64("水印 Basalt"),
        b64("#FF0000")
    );
    let (img, content_type) = processed(&base, &q).await;
    assert_eq!(
        (img.width(), img.height(), content_type.as_str()),
        (300, 200, "image/png")
    );
    let img = img.to_rgb8();
    let red_in = |x0: u32, y0: u32, x1: u32, y1: u32| {
        (x0..x1)
            .flat_map(|x| (y0..y1).map(move |y| (x, y)))
            .filter(|(x, y)| is_red(img.get_pixel(*x, *y)))
            .count()
    };
    assert!(red_in(150, 140, 290, 190) > 200, "no text in the corner");
    assert_eq!(red_in(0, 0, 300, 130), 0, "text outside the corner");
    assert_eq!(
        red_in(290, 0, 300, 200) + red_in(0, 190, 300, 200),
        0,
        "text in the margins"
    );

    let q = format!(
        "watermark/2/text/{}/fill/{}/fontsize/800/gravity/North/dissolve/50",
        b64("Basalt"),
        b64("red")
    );
    let (img, _) = processed(&base, &q).await;
    let img = img.to_rgb8();
    assert!(
        img.pixels()
            .any(|p| p.0[0] > 240 && (100..200).contains(&p.0[1])),
        "no pink ink"
    );
    assert!(!img.pixels().any(is_red), "opaque ink");
}

/// Image watermarks are the app's own stored images: placed without margins, scaled to a
/// share of the short edge, drawn on a thumbnail in a pipeline; another app's file, a url
/// elsewhere or a file no app stores is no watermark (160).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn image_watermarks_are_the_apps_own_stored_images() {
    let (cluster, _c, base, mark, red) = marked().await;
    let q = format!(
        "watermark/1/image/{}/gravity/NorthWest/dx/0/dy/0",
        b64(&mark)
    );
    let (img, _) = processed(&base, &q).await;
    let img = img.to_rgb8();
    assert!(is_red(img.get_pixel(0, 0)) && is_red(img.get_pixel(19, 19)));
    assert!(!is_red(img.get_pixel(20, 20)));
    let q = format!("watermark/1/image/{}/gravity/Center/ws/0.25", b64(&mark));
    let (img, _) = processed(&base, &q).await;
    let img = img.to_rgb8();
    assert!(is_red(img.get_pixel(126, 76)) && is_red(img.get_pixel(173, 123)));
    assert!(!is_red(img.get_pixel(120, 70)) && !is_red(img.get_pixel(180, 130)));
    // A thumbnail, then a mark on it.
    let q = format!(
        "imageView2/2/w/100|watermark/1/image/{}/gravity/NorthWest/dx/0/dy/0",
        b64(&mark)
    );
    let (img, _) = processed(&base, &q).await;
    assert_eq!((img.width(), img.height()), (100, 67));
    assert!(is_red(img.to_rgb8().get_pixel(10, 10)));

    // Another app's file, or anything that is not a stored file, is no watermark (160).
    let other = cluster.create_app(0, "other").await;
    let theirs = upload(
        &cluster.app_client(0, &other),
        "theirs.png",
        encoded(red, ImageFormat::Png),
    )
    .await;
    refused(&base, &format!("watermark/1/image/{}", b64(&theirs)), 160).await;
    refused(
        &base,
        &format!(
            "watermark/1/image/{}",
            b64("http://169.254.169.254/latest/meta-data")
        ),
        160,
    )
    .await;
    let gone = mark.replace(&mark[mark.len() - 36..mark.len() - 4], &"0".repeat(32));
    refused(&base, &format!("watermark/1/image/{}", b64(&gone)), 160).await;
}

/// A private app: the signature of the picture does not open the mark (403); the mark's own
/// signature does.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_private_apps_mark_needs_its_own_signature() {
    let (cluster, c, base, mark, _red) = marked().await;
    cluster
        .set_app_settings(serde_json::json!({"privateFiles": true}))
        .await;
    let signed = c
        .request(
            Method::POST,
            "/2/cdnSignedUrls",
            Some(&serde_json::json!({"urls": [base, mark]})),
            false,
        )
        .await
        .expect("sign")
        .body;
    let (signed_base, signed_mark) = (
        signed["results"][0].as_str().unwrap(),
        signed["results"][1].as_str().unwrap(),
    );
    let signature = signed_base.split_once('?').unwrap().1;
    let with_mark = |mark_url: &str| {
        format!(
            "{base}?watermark/1/image/{}/gravity/NorthWest/dx/0/dy/0&{signature}",
            b64(mark_url)
        )
    };
    let r = reqwest::get(with_mark(&mark)).await.unwrap();
    assert_eq!(r.status(), 403);
    let r = reqwest::get(with_mark(signed_mark)).await.unwrap();
    assert_eq!(r.status(), 200);
    let img = image::load_from_memory(&r.bytes().await.unwrap())
        .unwrap()
        .to_rgb8();
    assert!(is_red(img.get_pixel(5, 5)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_parameters_and_unprocessable_files_answer_their_codes() {
    let cluster = TestCluster::start(1, &[], &[]).await;
    let c = cluster.client(0);
    let photo = upload(&c, "photo.png", encoded(gradient(64, 48), ImageFormat::Png)).await;

    for (q, code) in [
        ("imageView2/9/w/10", 161),
        ("imageView2/w/10", 161),
        ("imageView2/1/w/0/h/10", 162),
        ("imageView2/2/w/100000", 162),
        ("imageView2/3/w/10/h/x", 163),
        ("imageView2/0/w/-5", 164),
        ("imageView2/4/w/10/h/99999", 165),
        ("imageView2/2", 162),
        ("imageView2/2/w/10/format/tiff", 160),
        ("imageView2/2/w/10/q/0", 160),
        ("imageView2/2/w/10/blur/3", 160),
        ("watermark/2/text/!!", 160),
        ("watermark/2/text/YQ/gravity/Middle", 160),
        ("watermark/7/text/YQ", 160),
        ("imageView2/2/w/10|rotate/90", 160),
    ] {
        refused(&photo, q, code).await;
    }
    // Bad parameters are refused before the file is looked up; a good one of no file is 404.
    let unknown = photo.replace(&photo[photo.len() - 36..photo.len() - 4], &"0".repeat(32));
    refused(&unknown, "imageView2/9/w/10", 161).await;
    assert_eq!(get(&unknown, "imageView2/2/w/10").await.0, 404);

    // A file that is not an image: 160, or the file itself with ignore-error/1.
    let text = upload(&c, "notes.jpg", b"not a picture at all".to_vec()).await;
    refused(&text, "imageView2/2/w/10", 160).await;
    let (status, _, body) = get(&text, "imageView2/2/w/10/ignore-error/1").await;
    assert_eq!(
        (status, body.as_slice()),
        (200, b"not a picture at all".as_slice())
    );

    // A picture whose header claims 30000×30000 pixels over a few bytes (a decompression
    // bomb) is refused without decoding it; the node carries on.
    let mut bomb = Vec::new();
    {
        let mut encoder = png::Encoder::new(&mut bomb, 30_000, 30_000);
        encoder.set_color(png::ColorType::Rgba);
        let mut writer = encoder.write_header().expect("png header");
        writer
            .write_chunk(png::chunk::IDAT, &[0x78, 0x9c, 0x63, 0x00])
            .expect("png data");
    }
    let bomb = upload(&c, "bomb.png", bomb).await;
    refused(&bomb, "imageView2/2/w/100", 160).await;
    // A file above the processing bound (20 MiB) is not read into memory: 160 (a valid PNG,
    // whose decoder would stop at its end, followed by 21 MiB).
    let mut big = encoded(gradient(64, 48), ImageFormat::Png);
    big.resize(big.len() + (21 << 20), 0);
    let big = upload(&c, "big.png", big).await;
    refused(&big, "imageView2/2/w/100", 160).await;
    assert!(c.healthy().await);
    let (img, _) = processed(&photo, "imageView2/2/w/32").await;
    assert_eq!((img.width(), img.height()), (32, 24));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_result_is_computed_once_per_node_and_revalidates() {
    let cluster = TestCluster::start(1, &[], &[]).await;
    let c = cluster.client(0);
    let photo = upload(
        &c,
        "photo.jpg",
        encoded(gradient(800, 600), ImageFormat::Jpeg),
    )
    .await;
    let rendered = "basalt_images_rendered_total";
    let before = counter(&cluster, 0, rendered).await;

    // Twelve requests race for a thumbnail no one asked for yet: it is computed once and every
    // answer is the same picture.
    let q = "imageView2/1/w/120/h/120/format/webp";
    let answers = futures::future::join_all((0..12).map(|_| get(&photo, q))).await;
    let first = &answers[0];
    assert_eq!((first.0, first.1.as_str()), (200, "image/webp"));
    assert!(answers.iter().all(|a| a == first));
    assert_eq!(counter(&cluster, 0, rendered).await, before + 1);
    // Asked again later: from the cache.
    assert_eq!(&get(&photo, q).await, first);
    assert_eq!(counter(&cluster, 0, rendered).await, before + 1);
    assert!(counter(&cluster, 0, "basalt_images_cache_hits_total").await >= 1);

    // Its own ETag (not the file's), and a revalidation answers 304.
    let r = reqwest::get(format!("{photo}?{q}")).await.unwrap();
    let etag = r.headers()["etag"].to_str().unwrap().to_string();
    let file_etag = reqwest::get(&photo).await.unwrap().headers()["etag"].clone();
    assert_ne!(etag.as_str(), file_etag.to_str().unwrap());
    assert!(r.headers()["cache-control"]
        .to_str()
        .unwrap()
        .contains("max-age"));
    let r = reqwest::Client::new()
        .get(format!("{photo}?{q}"))
        .header("if-none-match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 304);

    // A deleted file's thumbnails go with it, cached or not.
    let path = photo.split_once("/basalt/").map(|(_, p)| p).unwrap();
    c.request(
        Method::DELETE,
        &format!("/2/files/basalt/{path}"),
        None,
        false,
    )
    .await
    .expect("delete");
    assert_eq!(get(&photo, q).await.0, 404);
}

/// How many files the default app stores (console usage).
async fn stored_files(cluster: &TestCluster) -> u64 {
    let usage = cluster
        .console_client(0)
        .request(
            reqwest::Method::GET,
            &format!("/1/apps/{}/files", cluster.keys.application_id),
            None,
            false,
        )
        .await
        .expect("usage")
        .body;
    usage["files"].as_u64().expect("files")
}

/// A 3-second 160×120 test video (ffmpeg's `testsrc`: a frame counter that changes each
/// second) as MP4.
fn test_video() -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v.mp4");
    let made = std::process::Command::new("ffmpeg")
        .args(["-hide_banner", "-loglevel", "error", "-f", "lavfi", "-i"])
        .arg("testsrc=duration=3:size=160x120:rate=10")
        .args(["-pix_fmt", "yuv420p", "-y"])
        .arg(&path)
        .status()
        .expect("ffmpeg (scripts/install-deps.sh installs it)");
    assert!(made.success());
    std::fs::read(&path).unwrap()
}

async fn snapshot(c: &Client, body: Value) -> Result<Value, basalt_client::Error> {
    c.request(Method::POST, "/2/cdnVedioSnapshot", Some(&body), false)
        .await
        .map(|r| r.body)
}

/// A snapshot stores the frame at a point as a new file of the app, named after `save_as`
/// (JPEG, or PNG on asking); another point is another frame; the frame is a file like any
/// other (thumbnails of it work).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_video_snapshot_stores_the_frame_at_a_point() {
    let cluster = TestCluster::start(1, &[], &[]).await;
    let c = cluster.client(0);
    let video = upload(&c, "clip.mp4", test_video()).await;
    let answer = snapshot(
        &c,
        serde_json::json!({"source": video, "save_as": "https://old.cdn/snaps/cover.jpg", "point": "00:00:01"}),
    )
    .await
    .expect("snapshot");
    assert_eq!(answer["status_code"], 200);
    assert_eq!(answer["content_type"], "image/jpeg");
    assert_eq!(answer["filename"], "cover.jpg");
    assert_eq!(answer["cdn"], "basalt");
    let url = answer["save_as"].as_str().unwrap().to_string();
    assert_eq!(answer["url"], url.as_str());
    let r = reqwest::get(&url).await.unwrap();
    assert_eq!(r.headers()["content-type"], "image/jpeg");
    let one = r.bytes().await.unwrap();
    assert_eq!(answer["content_length"].as_u64(), Some(one.len() as u64));
    let one = image::load_from_memory(&one).unwrap().to_rgb8();
    assert_eq!(one.dimensions(), (160, 120));
    let answer = snapshot(
        &c,
        serde_json::json!({"source": video, "save_as": "two.png", "point": "00:00:02.5"}),
    )
    .await
    .expect("snapshot");
    assert_eq!(answer["content_type"], "image/png");
    let two = reqwest::get(answer["url"].as_str().unwrap())
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let two = image::load_from_memory_with_format(&two, ImageFormat::Png)
        .unwrap()
        .to_rgb8();
    let differing = one
        .pixels()
        .zip(two.pixels())
        .filter(|(a, b)| a.0.iter().zip(b.0.iter()).any(|(x, y)| x.abs_diff(*y) > 60));
    assert!(
        differing.count() > 100,
        "the two frames are the same picture"
    );
    let (thumb, _) = processed(&url, "imageView2/2/w/80").await;
    assert_eq!((thumb.width(), thumb.height()), (80, 60));
}

/// Table — refused snapshots, storing nothing: a point past the end, a file that is no video
/// or a playlist dressed as one (not followed) are 155; a source that is no stored file of
/// this app 151; an incomplete body or a point that is no time 107; a name that is no
/// picture's 146; no app keys 401.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn refused_video_snapshots_store_nothing() {
    use crate::common::scenario::{run_rows, As, Row};
    let cluster = TestCluster::start(1, &[], &[]).await;
    let c = cluster.client(0);
    let video = upload(&c, "clip.mp4", test_video()).await;
    let playlist = format!("#EXTM3U\n#EXTINF:3,\n{video}\n#EXTINF:3,\nfile:///etc/hostname\n");
    let playlist = upload(&c, "list.mp4", playlist.into_bytes()).await;
    let text = upload(&c, "notes.mp4", b"not a video".to_vec()).await;
    let other = cluster.create_app(0, "other").await;
    let theirs = upload(&cluster.app_client(0, &other), "theirs.mp4", test_video()).await;
    let unknown = video.replace(&video[video.len() - 36..video.len() - 4], &"0".repeat(32));
    let files_before = stored_files(&cluster).await;
    let ask = |name: &'static str, body: Value| {
        Row::new(name, Method::POST, "/2/cdnVedioSnapshot").body(body.to_string())
    };
    let at = |source: &str, save_as: &str, point: &str| serde_json::json!({"source": source, "save_as": save_as, "point": point});
    let rows = vec![
        ask("a point past the end", at(&video, "x.jpg", "00:00:09")).fails(400, 155),
        ask("an hour in", at(&video, "x.jpg", "01:00:00")).fails(400, 155),
        ask(
            "a playlist dressed as a video",
            at(&playlist, "x.jpg", "00:00:01"),
        )
        .fails(400, 155),
        ask("a file that is no video", at(&text, "x.jpg", "00:00:00")).fails(400, 155),
        ask("another app's file", at(&theirs, "x.jpg", "00:00:01")).fails(400, 151),
        ask("a file no app stores", at(&unknown, "x.jpg", "00:00:01")).fails(400, 151),
        ask(
            "a url elsewhere",
            at("https://example.com/v.mp4", "x.jpg", "00:00:01"),
        )
        .fails(400, 151),
        ask(
            "no point",
            serde_json::json!({"source": video, "save_as": "x.jpg"}),
        )
        .fails(400, 107),
        ask(
            "a point that is a number",
            serde_json::json!({"source": video, "save_as": "x.jpg", "point": 5}),
        )
        .fails(400, 107),
        ask("a point in seconds", at(&video, "x.jpg", "5s")).fails(400, 107),
        ask("61 minutes", at(&video, "x.jpg", "00:61:00")).fails(400, 107),
        ask(
            "no source",
            serde_json::json!({"save_as": "x.jpg", "point": "00:00:01"}),
        )
        .fails(400, 107),
        ask("a gif", at(&video, "x.gif", "00:00:01")).fails(400, 146),
        ask("no extension", at(&video, "noext", "00:00:01")).fails(400, 146),
        ask("a directory", at(&video, "dir/", "00:00:01")).fails(400, 146),
        ask("no app keys", at(&video, "x.jpg", "00:00:01"))
            .auth(As::Nobody)
            .unauthorized(),
    ];
    run_rows(&cluster, &rows).await;
    assert_eq!(stored_files(&cluster).await, files_before, "nothing stored");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_without_ffmpeg_answers_156() {
    let cluster = TestCluster::start(1, &[], &["--ffmpeg", "/nonexistent/ffmpeg"]).await;
    let c = cluster.client(0);
    let video = upload(&c, "clip.mp4", b"any bytes".to_vec()).await;
    let e = snapshot(
        &c,
        serde_json::json!({"source": video, "save_as": "x.jpg", "point": "00:00:01"}),
    )
    .await;
    crate::common::assert_api_error(e, 501, 156, "no ffmpeg");
}

/// A video of one 8000×8000 frame (64 million pixels, more than an image may have), as MJPEG
/// in AVI.
fn huge_frame_video() -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.avi");
    let made = std::process::Command::new("ffmpeg")
        .args(["-hide_banner", "-loglevel", "error", "-f", "lavfi", "-i"])
        .arg("color=c=blue:s=8000x8000:d=1:r=1")
        .args([
            "-frames:v",
            "1",
            "-c:v",
            "mjpeg",
            "-pix_fmt",
            "yuvj420p",
            "-y",
        ])
        .arg(&path)
        .status()
        .expect("ffmpeg");
    assert!(made.success());
    std::fs::read(&path).unwrap()
}

/// Frames larger than an image may be are refused before ffmpeg decodes them (ffprobe says
/// their size: 160); a node with no ffprobe beside its ffmpeg still refuses them, ffmpeg's
/// decoder stopping at the pixel limit (155), and the node's memory does not hold the frame.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn video_frames_larger_than_an_image_are_refused_before_decoding() {
    let video = huge_frame_video();
    let alone = tempfile::tempdir().unwrap();
    let ffmpeg_alone = alone.path().join("ffmpeg");
    std::os::unix::fs::symlink("/usr/bin/ffmpeg", &ffmpeg_alone).unwrap();
    for (ffmpeg, code) in [
        ("/usr/bin/ffmpeg", 160),
        (ffmpeg_alone.to_str().unwrap(), 155),
    ] {
        let cluster = TestCluster::start(1, &[], &["--ffmpeg", ffmpeg]).await;
        let c = cluster.client(0);
        let source = upload(&c, "big.avi", video.clone()).await;
        let (before, _) = cluster.memory_kib(0);
        let refused = snapshot(
            &c,
            serde_json::json!({"source": source, "save_as": "big.png", "point": "00:00:00"}),
        )
        .await;
        assert_api_error(refused, 400, code, ffmpeg);
        let (_, peak) = cluster.memory_kib(0);
        assert!(
            peak < before + 100 * 1024,
            "{before} KiB, then a peak of {peak} KiB"
        );
    }
}
