//! `ImageError`: why an image operation was refused or failed. `api::error` gives each its
//! wire code (160–165, or 503 and internal faults); the other `images` modules report with it.

use basalt_cluster::Error as ClusterError;

/// Why an image could not be processed; `api::error` gives each its code (160–165).
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// A parameter other than the mode and sizes is wrong (160).
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Mode(String),
    #[error("{0}")]
    Width(String),
    #[error("{0}")]
    Height(String),
    #[error("{0}")]
    LongEdge(String),
    #[error("{0}")]
    ShortEdge(String),
    /// The file is not a JPEG, PNG, GIF or WebP image, or is damaged (160).
    #[error("the file is not an image that can be processed: {0}")]
    NotAnImage(String),
    /// The file or its picture is beyond the processing bounds (160).
    #[error("{0}")]
    TooLarge(String),
    /// A watermark image that is not a file of the same app (160).
    #[error("the watermark image {0:?} is not a file of this app.")]
    MarkNotFound(String),
    /// No font is installed for text watermarks (160).
    #[error("this node has no font for text watermarks.")]
    NoFont,
    #[error("the image could not be encoded: {0}")]
    Encode(String),
    /// Every worker stayed busy for `WORKER_WAIT` (503).
    #[error("the node is busy processing other images; try again later.")]
    Busy,
    #[error("image worker: {0}")]
    Worker(String),
    #[error(transparent)]
    Cluster(#[from] ClusterError),
}

impl ImageError {
    /// True when the file itself could not be processed (as opposed to a bad parameter or a
    /// cluster fault): `ignore-error/1` then answers the file unchanged.
    pub fn is_about_the_file(&self) -> bool {
        matches!(
            self,
            ImageError::NotAnImage(_) | ImageError::TooLarge(_) | ImageError::Encode(_)
        )
    }
}
