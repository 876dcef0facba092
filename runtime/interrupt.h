// SIGINT / SIGTERM during long work (train, sft): the first signal asks the work to stop at its
// next safe point (the trainers finish the step in flight, write a checkpoint, say where, and
// exit with 128 + the signal); the second one ends the process at once (the default action is
// restored by the first), with the run folder as the last checkpoint left it.
#pragma once

namespace sqlrl {

void install_interrupt_handlers();  // idempotent
bool interrupt_requested();
int interrupt_signal();  // the signal received (0: none)

}  // namespace sqlrl
