// TensorBoard event files, written natively (no Python at run time): the TFRecord framing around
// tensorboard.Event protobuf messages (runtime/proto/*.proto, a minimal copy of TensorBoard's
// tensorboard/compat/proto schema). docs/tensorboard.md says what the trainers log with it.
//
// A file is a sequence of records, each
//   uint64 length (little-endian) | uint32 masked CRC-32C of those 8 bytes | data | uint32 masked CRC-32C of data
// (tensorflow/core/lib/io/record_writer.cc), where mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8.
// The first record is an Event with file_version "brain.Event:2"; each later one an Event whose
// Summary holds scalars (simple_value) or text (a DT_STRING tensor with the "text" plugin's
// metadata, which TensorBoard's text plugin shows as markdown).
#pragma once
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace sqlrl {

// CRC-32C (Castagnoli, the iSCSI polynomial; ISA-L's crc32_iscsi) and TFRecord's mask of it.
uint32_t crc32c(const void* data, size_t n);
uint32_t masked_crc32c(const void* data, size_t n);
// One record: length, masked CRC of the length, data, masked CRC of the data.
std::string tfrecord_frame(const std::string& data);
// The records of a TFRecord file, every CRC checked (an error names the file and the byte
// offset). An incomplete last record (a process killed while writing it) ends the list.
std::vector<std::string> read_tfrecords(const std::string& path);

// One events file, appended to and flushed per event, so a crash loses at most the event in flight.
struct EventFile {
  std::string path;
  std::ofstream out;
};
// Creates DIR/events.out.tfevents.<10-digit Unix seconds>.<host> (DIR made if missing) and writes
// its file_version event. TensorBoard reads a folder's events files in name order, so the
// seconds are raised past the newest file already in DIR: a restart's file always sorts last.
EventFile create_event_file(const std::string& dir);
// One event at `step` with one scalar per (tag, value) (TensorBoard stores simple_value as float32).
void write_scalars(EventFile& f, int64_t step, const std::vector<std::pair<std::string, double>>& values);
// One event at `step` with a text summary (markdown) under `tag`.
void write_text(EventFile& f, int64_t step, const std::string& tag, const std::string& markdown);

// The events files of DIR in TensorBoard's reading order (by name); none when DIR is missing.
std::vector<std::string> event_files(const std::string& dir);
// Rewrites every events file of DIR (each atomically, under its own name, so the reading order
// stays) keeping the events for which keep(step, first tag) holds (first tag "" for an event
// without a summary value); a file left without any summary event is deleted.
void truncate_event_files(const std::string& dir, const std::function<bool(int64_t step, const std::string& tag)>& keep);

}  // namespace sqlrl
