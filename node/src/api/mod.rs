//! The HTTP surface on one screen: every implemented path of the spec and its handler.
//!
//! Grouped by family; each family's handlers live in the file of the same name.

pub mod context;
pub mod error;
pub mod objects;
pub mod ops;

use axum::routing::get;
use axum::Router;

use context::AppState;

pub fn routes(state: AppState) -> Router {
    Router::new()
        // Objects (spec 4.1).
        .route(
            "/1/classes/{class}",
            get(objects::query_objects).post(objects::create_object),
        )
        .route(
            "/1/classes/{class}/{id}",
            get(objects::get_object)
                .put(objects::update_object)
                .delete(objects::delete_object),
        )
        // Operations: health and Prometheus metrics (not part of the spec).
        .route("/health", get(ops::health))
        .route("/metrics", get(ops::metrics))
        .fallback(ops::not_found)
        .with_state(state)
}
