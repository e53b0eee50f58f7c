export { type AdapterSite, type MergedAdapter, type MergedPetExtensions, type MergedPetModel, type MergedPrefix, adapterKey, mergePetIntoWeights } from './merge.js';
export { type ReferenceOutput, type ReferenceSequence, erf, geluErfRef, geluTanhRef, referenceEncoderForward } from './forward.js';
export { petRowIndices, referencePetOp, referencePetSiteRun } from './pet-ops.js';
