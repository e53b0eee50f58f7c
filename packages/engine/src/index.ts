/**
 * @tessera/engine: the layer every Tessera app runs its models through.
 */
export * from './errors.js';
export type { DecoderConfig, EncoderConfig, ModelConfig } from './config.js';
export * from './models/names.js';
export { SAFETENSORS_DTYPES, type SafetensorsEntry, writeSafetensors } from './formats/safetensors.js';
