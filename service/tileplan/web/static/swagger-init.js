// Starts Swagger UI on /docs from files this server serves (the page's CSP allows no inline script).
(function () {
  var el = document.getElementById("swagger-ui");
  window.ui = SwaggerUIBundle({
    url: el.dataset.openapi,
    dom_id: "#swagger-ui",
    oauth2RedirectUrl: window.location.origin + el.dataset.oauth2Redirect,
    layout: "BaseLayout",
    deepLinking: true,
    showExtensions: true,
    showCommonExtensions: true,
    presets: [SwaggerUIBundle.presets.apis, SwaggerUIBundle.SwaggerUIStandalonePreset].filter(Boolean),
  });
})();
