/** Benchmarking any MCP server: load, robustness (fuzz), agent success, and their reports. */
export { runBench } from './run.ts';
export type { BenchOptions } from './run.ts';
export { LatencyStore, quantileOf, logHistogram } from './latency.ts';
export type { Histogram, LatencySummary } from './latency.ts';
export { runLevel, loadTool, DEFAULT_CONCURRENCY } from './load.ts';
export type { Caller, LevelOptions, LevelResult, LoadOptions, ToolLoad } from './load.ts';
export { splitCommandLine, parseExamples, generateArguments, sampleValid, schemaValidator } from './args.ts';
export type { Args, GeneratedArgs } from './args.ts';
export { fuzzCases, sendAndClassify, runFuzz, saveFailures, readFailures, replayFailures, OUTCOMES, ODD_STRINGS, REDOS_PATTERNS, BACKTRACKING_SUBJECT } from './fuzz.ts';
export type { Outcome, FuzzCase, FuzzClient, FuzzFailure, FuzzOptions, FuzzGenOptions, FuzzReport, ToolFuzz, Classified, ReplayResult } from './fuzz.ts';
export { passAtK, passHatK, taskStats, agentReport, runAgentBench } from './agent.ts';
export type { AgentReport, TaskAgentStats, AgentBenchOptions } from './agent.ts';
export { writeRisk, writingTools } from './safety.ts';
export type { SkippedTool } from './safety.ts';
export { ProcessSampler, processCpuMs, processPeakRss } from './proc.ts';
export type { ProcessReport } from './proc.ts';
export { renderText, renderHtml, reportJson, textTable, histogramSvg, throughputSvg, fuzzSvg } from './report.ts';
export type { BenchReport } from './report.ts';
