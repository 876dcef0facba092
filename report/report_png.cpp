// `report --png DIR`: each chart's SVG rasterised by librsvg onto a cairo image surface, written
// as PNG by cairo (Debian librsvg2-dev). A build without librsvg refuses with one line.
#include <filesystem>

#include "report/report.h"
#include "runtime/error.h"

#ifdef SQLRL_HAVE_RSVG
#include <cairo.h>
#include <librsvg/rsvg.h>
#endif

namespace sqlrl {

bool report_png_supported() {
#ifdef SQLRL_HAVE_RSVG
  return true;
#else
  return false;
#endif
}

std::vector<std::string> write_chart_pngs(const std::vector<ReportChart>& charts, const std::string& dir,
                                          double smoothing) {
#ifndef SQLRL_HAVE_RSVG
  (void)charts, (void)smoothing;
  fail("report --png ", dir, ": this build has no librsvg (Debian: librsvg2-dev; scripts/setup.sh installs it), rebuild");
#else
  std::filesystem::create_directories(dir);
  std::vector<std::string> paths;
  constexpr double kScale = 2;  // twice the SVG's pixels: sharp in papers and on high-DPI screens
  for (const ReportChart& chart : charts) {
    const std::string svg = chart_svg(chart, smoothing);
    const std::string path = (std::filesystem::path(dir) / (chart.id + ".png")).string();
    GError* error = nullptr;
    RsvgHandle* handle = rsvg_handle_new_from_data(reinterpret_cast<const guint8*>(svg.data()), svg.size(), &error);
    if (!handle) {
      const std::string why = error ? error->message : "unknown";
      if (error) g_error_free(error);
      fail(path, ": librsvg refused the chart's SVG: ", why);
    }
    gdouble w = 0, h = 0;
    check(rsvg_handle_get_intrinsic_size_in_pixels(handle, &w, &h) && w > 0 && h > 0, path,
          ": the chart's SVG has no size in pixels");
    cairo_surface_t* surface = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, static_cast<int>(w * kScale + 0.5),
                                                          static_cast<int>(h * kScale + 0.5));
    cairo_t* cr = cairo_create(surface);
    const RsvgRectangle viewport{0, 0, w * kScale, h * kScale};
    const bool drawn = rsvg_handle_render_document(handle, cr, &viewport, &error);
    std::string why = drawn ? "" : (error ? error->message : "unknown");
    if (error) g_error_free(error);
    cairo_destroy(cr);
    const cairo_status_t status = drawn ? cairo_surface_write_to_png(surface, path.c_str()) : CAIRO_STATUS_SUCCESS;
    cairo_surface_destroy(surface);
    g_object_unref(handle);
    check(drawn, path, ": librsvg could not draw the chart: ", why);
    check(status == CAIRO_STATUS_SUCCESS, path, ": cairo could not write the PNG: ", cairo_status_to_string(status));
    paths.push_back(path);
  }
  return paths;
#endif
}

}  // namespace sqlrl
