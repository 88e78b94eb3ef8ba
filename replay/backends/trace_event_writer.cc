#include "replay/backends/trace_event_writer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <tuple>

#include "capture/core/text_escape.h"

namespace tracecache {

namespace {

constexpr int kHostTid = 1;
constexpr int kDeviceTid = 2;

void append_string(std::string& out, std::string_view s) { append_json_string(out, s); }

// Picoseconds as microseconds, exactly: "12.345678".
std::string micros(int64_t ps) {
  const uint64_t magnitude = ps < 0 ? 0 - static_cast<uint64_t>(ps) : static_cast<uint64_t>(ps);
  return fmt::format("{}{}.{:06}", ps < 0 ? "-" : "", magnitude / 1'000'000, magnitude % 1'000'000);
}

// The opening of one event: {"name":...,"ph":...,"pid":1,"tid":...
void open_event(std::string& out, std::string_view name, std::string_view phase, int tid) {
  out += out.back() == '[' ? "\n{\"name\":" : ",\n{\"name\":";
  append_string(out, name);
  out += ",\"ph\":";
  append_string(out, phase);
  out += fmt::format(",\"pid\":1,\"tid\":{}", tid);
}

void append_args(std::string& out, const std::vector<TimelineArg>& args) {
  if (args.empty()) return;
  out += ",\"args\":{";
  for (size_t i = 0; i < args.size(); ++i) {
    if (i > 0) out += ',';
    append_string(out, args[i].key);
    out += ':';
    if (const auto* n = std::get_if<int64_t>(&args[i].value)) {
      out += std::to_string(*n);
    } else {
      append_string(out, std::get<std::string>(args[i].value));
    }
  }
  out += '}';
}

void metadata(std::string& out, std::string_view what, int tid, std::string_view name) {
  open_event(out, what, "M", tid);
  out += ",\"args\":{\"name\":";
  append_string(out, name);
  out += "}}";
}

}  // namespace

std::string trace_event_json(const Timeline& timeline, const TraceEventNames& names) {
  std::vector<const TimelineEvent*> slices;
  slices.reserve(timeline.events().size());
  for (const TimelineEvent& e : timeline.events()) slices.push_back(&e);
  std::stable_sort(slices.begin(), slices.end(), [](const TimelineEvent* a, const TimelineEvent* b) {
    return std::tuple(a->track, a->start_ps, -a->duration_ps) < std::tuple(b->track, b->start_ps, -b->duration_ps);
  });
  std::vector<const TimelineCounter*> counters;
  for (const TimelineCounter& c : timeline.counters()) counters.push_back(&c);
  std::stable_sort(counters.begin(), counters.end(),
                   [](const TimelineCounter* a, const TimelineCounter* b) { return a->at_ps < b->at_ps; });
  std::vector<const TimelineFlow*> flows;
  for (const TimelineFlow& f : timeline.flows()) flows.push_back(&f);
  std::stable_sort(flows.begin(), flows.end(),
                   [](const TimelineFlow* a, const TimelineFlow* b) { return a->host_ps < b->host_ps; });

  std::string out = "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[";
  metadata(out, "process_name", 0, names.process);
  metadata(out, "thread_name", kHostTid, names.host_track);
  metadata(out, "thread_name", kDeviceTid, names.device_track);
  for (const TimelineEvent* e : slices) {
    open_event(out, e->name, "X", e->track == TimelineEvent::Track::kHost ? kHostTid : kDeviceTid);
    out += ",\"cat\":";
    append_string(out, e->category);
    out += fmt::format(",\"ts\":{},\"dur\":{}", micros(e->start_ps), micros(e->duration_ps));
    append_args(out, e->args);
    out += '}';
  }
  for (const TimelineCounter* c : counters) {
    open_event(out, c->name, "C", kDeviceTid);
    out += fmt::format(",\"cat\":\"memory\",\"ts\":{},\"args\":{{\"bytes\":{}}}}}", micros(c->at_ps), c->value);
  }
  for (const TimelineFlow* f : flows) {
    open_event(out, "launch", "s", kHostTid);
    out += fmt::format(",\"cat\":\"flow\",\"id\":{},\"ts\":{}}}", f->id, micros(f->host_ps));
    open_event(out, "launch", "f", kDeviceTid);
    out += fmt::format(",\"cat\":\"flow\",\"id\":{},\"bp\":\"e\",\"ts\":{}}}", f->id, micros(f->device_ps));
  }
  out += "\n]}";
  return out;
}

Status write_trace_event_file(const std::string& path, const Timeline& timeline,
                              const TraceEventNames& names) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return io_error(fmt::format("cannot write the timeline '{}': {}", path, std::strerror(errno)));
  const std::string text = trace_event_json(timeline, names);
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size() && std::fputc('\n', f) != EOF;
  if (std::fclose(f) != 0 || !ok) return io_error(fmt::format("cannot write the timeline '{}'", path));
  return Status::ok();
}

}  // namespace tracecache
