/** Layer-wise adapter staging (HMI's A12): the pipeline's rules, and the same rules under virtual time. */
export {
  LayerwisePipeline,
  type LayerwisePipelineOptions,
  type PipelineAction,
  type PipelineMode,
  type PipelineResource,
  PipelineStateError,
  resourceOf,
} from './pipeline.js';
export { type PipelineSimulationOptions, type PipelineSimulationResult, type PipelineSpan, simulateLayerwisePipeline } from './simulate.js';
