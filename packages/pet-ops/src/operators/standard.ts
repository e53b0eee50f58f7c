/**
 * STANDARD: the plain shared model with the task's own head (the artifact's STANDARD = no PET). Nothing runs at
 * any site; only the head is the task's.
 */
import type { EncoderConfig } from '@tessera/engine';
import type { PetHooks, PetTensorSpec } from '../types.js';
import { BasePetOperator, type PetBody, emptyBody } from './base.js';

export class StandardOperator extends BasePetOperator {
  readonly type = 'standard' as const;
  readonly hooks: PetHooks = { input: [], output: [], epilogue: [], attention: false };

  protected bodyLayout(_config: EncoderConfig): PetTensorSpec[] {
    return [];
  }

  protected build(): PetBody {
    return emptyBody();
  }
}
