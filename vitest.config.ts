import { availableParallelism } from 'node:os';
import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: 'forks',
    // Every temporary file of the run under one directory, removed at the end (MCP_GYM_KEEP_TEST_TMP=1 keeps it).
    globalSetup: ['test/global-setup.ts'],
    // Vitest's default is one worker fewer than the cores: one worker on a 2-core machine. Most
    // test files spend their time waiting on the processes they start (tool servers, the learner,
    // the CLI), so two files at a time overlap those waits: 545 s instead of 800 s on 2 cores.
    maxWorkers: Math.max(2, availableParallelism()),
    reporters: ['default'],
  },
});
