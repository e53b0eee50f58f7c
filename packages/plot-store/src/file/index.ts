/**
 * The PLOT value file (@tessera/plot-store/file): an mmap-able fp16 row file with a reserved zero row, its writer
 * and a reader that serves the read half of PlotValueStore. Node's fs only; no engine, no native addon.
 */
export {
  type PlotFileHeader,
  PLOT_FILE_MAGIC,
  PLOT_FILE_VERSION,
  PLOT_FILE_HEADER_BYTES,
  PLOT_FILE_DTYPE_F16,
  plotFileRowBytes,
  plotFileBytes,
  encodeHeader,
  decodeHeader,
} from './format.js';
export { type PlotValueFileShape, PlotValueFileWriter } from './writer.js';
export { type ReadonlyPlotValueStore, type PlotValueFileMode, type OpenPlotValueFileOptions, PlotValueFile } from './reader.js';
export { PlotFileFormatError, PlotFileSizeError, PlotFileStateError } from './errors.js';
