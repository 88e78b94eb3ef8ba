// The Chrome trace-event file of a Timeline (replay/backends/timeline.h): the JSON object format
// ({"traceEvents": [...]}) that Perfetto (ui.perfetto.dev) and chrome://tracing load.
//
// One process (pid 1) named `names.process`, two threads: the host track (tid 1) and the device
// track (tid 2), named by metadata ("M") events. Slices are complete events ("X") with ts and dur
// in microseconds, written exactly from the picoseconds (six decimals), and their args; counter
// samples are counter events ("C") with args {"bytes": value} (every counter a timeline records
// is in bytes); a flow is a pair of flow events with one id: "s" on the host track at its host
// time and "f" (binding point "e": the device slice that starts there) on the device track.
// Slices are written per track in start order (an enclosing slice before the ones it encloses),
// then counters and flows in start order.
// Errors: write_trace_event_file returns kIOError naming the path when the file cannot be
// written; nothing else fails. Thread-safety: pure functions over a timeline no one is changing.
#pragma once

#include <string>

#include "replay/backends/timeline.h"
#include "capture/core/status.h"

namespace tracecache {

struct TraceEventNames {
  std::string process;       // e.g. "tracecache mlp.trace (sim h100, lazy)"
  std::string host_track;    // e.g. "host"
  std::string device_track;  // e.g. "device h100 stream"
};

// The file's text (one JSON object, no trailing newline).
std::string trace_event_json(const Timeline& timeline, const TraceEventNames& names);

// Writes trace_event_json and a newline to `path`, replacing it.
Status write_trace_event_file(const std::string& path, const Timeline& timeline,
                              const TraceEventNames& names);

}  // namespace tracecache
