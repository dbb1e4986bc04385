//! Refusals of files, image operations and video snapshots (`api::files`): 146-165, 206 for a
//! delete without the uploader's session, 403 for a private file's unsigned url, 1500.
//! Each variant's status and code are told here and nowhere else; `ApiError` wraps the family.

use axum::http::StatusCode;

#[derive(Debug, thiserror::Error)]
pub enum FilesApiError {
    #[error("{0}")]
    FileNameInvalid(String),
    #[error("the file is empty.")]
    FileEmpty,
    #[error("the file is larger than {0} bytes.")]
    FileTooLarge(u64),
    #[error("{0}")]
    FileNotFound(String),
    /// Some files of a `cdnBatchDelete` were not deleted: by cdn name, their urls.
    #[error("some files could not be deleted.")]
    FilesNotDeleted(serde_json::Value),
    /// A bad image operation, or a file that cannot be processed as asked (160).
    #[error("{0}")]
    ImageInvalid(String),
    #[error("{0}")]
    ImageMode(String),
    #[error("{0}")]
    ImageWidth(String),
    #[error("{0}")]
    ImageHeight(String),
    #[error("{0}")]
    ImageLongEdge(String),
    #[error("{0}")]
    ImageShortEdge(String),
    /// Deleting a file of an app whose files only their uploader deletes, without a session
    /// (206).
    #[error("{0}")]
    FileSessionRequired(String),
    /// A private file's url without a valid signature (403).
    #[error("{0}")]
    FilePrivate(String),
    /// A video snapshot: no frame at the point asked (155).
    #[error("{0}")]
    NoVideoFrame(String),
    /// A video snapshot: ffmpeg cannot run on this node (156).
    #[error("{0}")]
    NoFfmpeg(String),
}

impl FilesApiError {
    /// The wire code.
    pub fn code(&self) -> u32 {
        match self {
            FilesApiError::FileNameInvalid(_) => 146,
            FilesApiError::FileEmpty => 149,
            FilesApiError::FileTooLarge(_) => 1500,
            FilesApiError::FileNotFound(_) => 151,
            FilesApiError::FilesNotDeleted(_) => 154,
            FilesApiError::ImageInvalid(_) => 160,
            FilesApiError::ImageMode(_) => 161,
            FilesApiError::ImageWidth(_) => 162,
            FilesApiError::ImageHeight(_) => 163,
            FilesApiError::ImageLongEdge(_) => 164,
            FilesApiError::ImageShortEdge(_) => 165,
            FilesApiError::FileSessionRequired(_) => 206,
            FilesApiError::FilePrivate(_) => 403,
            FilesApiError::NoVideoFrame(_) => 155,
            FilesApiError::NoFfmpeg(_) => 156,
        }
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            FilesApiError::FileNameInvalid(_) => StatusCode::BAD_REQUEST,
            FilesApiError::FileEmpty => StatusCode::BAD_REQUEST,
            FilesApiError::FileTooLarge(_) => StatusCode::BAD_REQUEST,
            FilesApiError::FileNotFound(_) => StatusCode::BAD_REQUEST,
            FilesApiError::FilesNotDeleted(_) => StatusCode::BAD_REQUEST,
            FilesApiError::ImageInvalid(_) => StatusCode::BAD_REQUEST,
            FilesApiError::ImageMode(_) => StatusCode::BAD_REQUEST,
            FilesApiError::ImageWidth(_) => StatusCode::BAD_REQUEST,
            FilesApiError::ImageHeight(_) => StatusCode::BAD_REQUEST,
            FilesApiError::ImageLongEdge(_) => StatusCode::BAD_REQUEST,
            FilesApiError::ImageShortEdge(_) => StatusCode::BAD_REQUEST,
            FilesApiError::FileSessionRequired(_) => StatusCode::BAD_REQUEST,
            FilesApiError::FilePrivate(_) => StatusCode::FORBIDDEN,
            FilesApiError::NoVideoFrame(_) => StatusCode::BAD_REQUEST,
            FilesApiError::NoFfmpeg(_) => StatusCode::NOT_IMPLEMENTED,
        }
    }
}
