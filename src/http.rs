//! The HTTP face: the routes, the [`front`] every request enters (CORS,
//! the [`guard`]: access rules, authentication, limits; metrics and the
//! request log), error mapping ([`error`]: one table from code to status),
//! the extractors handlers take ([`extract`]), the request parameters more
//! than one handler parses ([`params`]) and the OpenAPI document.
//!
//! [`router`] builds the whole application without a socket, so tests drive
//! it with `tower::ServiceExt::oneshot`; `main.rs` serves it.

pub mod api;
pub mod auth;
pub mod browser;
pub mod cors;
pub mod dav;
pub mod docs;
pub mod error;
pub mod extract;
pub mod front;
pub mod guard;
pub mod health;
pub mod lengths;
pub mod links;
pub mod metrics;
pub mod openapi;
pub mod params;
pub mod store;

use std::sync::Arc;

use axum::http::HeaderName;
use axum::Router;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub use front::Front;

use crate::service::App;

/// The request-id header, read from the client when present and echoed back.
pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Every route, registered once for both the server and the OpenAPI
/// document ([`openapi::document`]).
///
/// The store protocol's method router also answers WebDAV methods
/// (PROPFIND, MKCOL) through its fallback, which OpenAPI cannot describe;
/// the mount root (`/zarr/{mount}` and `/zarr/{mount}/`) is the same handler
/// with an empty key.
///
/// Every route template needs an entry in [`auth::RULES`] (a unit test
/// checks the documented ones and [`MOUNT_ROOT_ROUTES`]); a request to a
/// template without one is refused.
pub fn routes() -> OpenApiRouter<Arc<App>> {
    let (_, store_paths, store) = routes!(store::get_key, store::put_key, store::delete_key);
    let store = store.fallback(store::other_method);
    let mut router =
        OpenApiRouter::with_openapi(openapi::ApiDoc::openapi()).routes((Vec::new(), store_paths, store.clone()));
    for path in MOUNT_ROOT_ROUTES {
        router = router.route(path, store.clone());
    }
    let router = router.routes(routes!(api::nodes::list_mounts));
    let router = api::node_routes(router, routes!(api::nodes::get_node, api::nodes::put_node, api::nodes::delete_node));
    let router = api::node_routes(router, routes!(api::consolidate::consolidate));
    let router = api::node_routes(router, routes!(api::data::get_data, api::data::post_data, api::write::put_data));
    let router = api::node_routes(router, routes!(api::data::get_chunk));
    let router = api::node_routes(router, routes!(api::image::get_preview));
    // The browser: `/`, a mount's place, and the mount root with its slash.
    let router = api::node_routes(router.routes(routes!(browser::index)), routes!(browser::browse))
        .route(BROWSE_ROOT_ROUTE, axum::routing::get(browser::browse))
        .routes(routes!(links::mint))
        .routes(routes!(links::read_linked));
    let router = api::node_routes(
        router,
        routes!(api::attributes::get_attributes, api::attributes::put_attributes, api::attributes::patch_attributes),
    );
    let router = api::node_routes(router, routes!(api::resize::resize));
    router
        .routes(routes!(api::pyramids::build_pyramid))
        .routes(routes!(api::jobs::get_job, api::jobs::cancel_job))
        .routes(routes!(health::healthz))
        .routes(routes!(health::readyz))
        .routes(routes!(openapi::serve))
        .routes(routes!(docs::docs_redirect))
        .routes(routes!(docs::docs_index))
        .routes(routes!(docs::docs_file))
        .routes(routes!(metrics::metrics))
}

/// Routes registered without an OpenAPI operation of their own: the mount
/// root, served by the store handlers with an empty key.
pub const MOUNT_ROOT_ROUTES: [&str; 2] = ["/zarr/{mount}", "/zarr/{mount}/"];

/// The browser's page of a mount's root, with its slash (the links' form),
/// registered without an operation of its own (`/browse/{mount}` is it).
pub const BROWSE_ROOT_ROUTE: &str = "/browse/{mount}/";

/// The whole application: the routes behind [`front::Front`].
///
/// # Panics
/// When a route is served without a rule in [`auth::RULES`] (a programming
/// error: it would be served unguarded; every test would show it).
pub fn router(app: Arc<App>) -> Front {
    let (router, api) = routes().split_for_parts();
    for template in api.paths.paths.keys().map(String::as_str).chain(MOUNT_ROOT_ROUTES).chain([BROWSE_ROOT_ROUTE]) {
        assert!(auth::rule(template).is_some(), "route {template} has no access rule in http::auth::RULES");
    }
    serve_routes(router, app)
}

/// `routes` with the fallback (the JSON 404), behind [`front::Front`] (tests
/// use it to put extra routes behind the same guard; those need rules too).
pub fn serve_routes(routes: Router<Arc<App>>, app: Arc<App>) -> Front {
    let router = routes.fallback(health::not_found).with_state(Arc::clone(&app));
    Front::new(router, &app)
}
