/**
 * @tessera/plot-store/build: computing PLOT values in window mode through the engine's staged encoder, and the
 * resumable builder that writes them as a PLOT value file. Uses @tessera/engine (and so the native addon); the
 * package's main entry stays pure.
 */
export { type PlotGate, type ComputePlotValuesOptions, ENCODER_SLOTS, computePlotValues } from './compute.js';
export { type BuildPlotTableOptions, type PlotBuildProgress, type PlotBuildResult, buildPlotTable, formatProgress } from './build-table.js';
