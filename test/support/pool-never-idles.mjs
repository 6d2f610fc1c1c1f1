// Preloaded into a child process (NODE_OPTIONS=--import …) by the tests that assert a CLI exits by
// itself: every pg.Pool made without an idle timeout keeps its idle connections for ever instead of
// pg's default 10 s. A command that forgets to end its pool then never exits — the test's process
// timeout kills it and its exit code says so — instead of exiting 10 s late, which only a bound on
// wall time could tell. Nothing else changes: a pool that sets its own idle timeout keeps it.
import pg from 'pg';

const Pool = pg.Pool;
pg.Pool = class extends Pool {
  constructor(options = {}) {
    super({ idleTimeoutMillis: 0, ...options });
  }
};
