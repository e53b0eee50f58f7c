/**
 * The PET registry (pets.md §2.5): PET type → operator (its hooks, parameter layout, loader and ops). The default
 * registry holds all seven types; a new type implements PetOperator and registers itself.
 */
import { UnknownPetTypeError } from './errors.js';
import { AdapterOperator } from './operators/adapter.js';
import { BitFitOperator } from './operators/bitfit.js';
import { DiffOperator } from './operators/diff.js';
import { LoraOperator } from './operators/lora.js';
import { MaskBertOperator } from './operators/maskbert.js';
import { PrefixOperator } from './operators/prefix.js';
import { StandardOperator } from './operators/standard.js';
import { PET_TYPES, type PetOperator, type PetType } from './types.js';

export class PetRegistry {
  private readonly operators = new Map<string, PetOperator>();

  /** Adds (or replaces) the operator of `op.type`. */
  register(op: PetOperator): this {
    this.operators.set(op.type, op);
    return this;
  }

  has(type: string): type is PetType {
    return this.operators.has(type);
  }

  /** The operator of `type`; throws UnknownPetTypeError listing the registered types. */
  get(type: string): PetOperator {
    const op = this.operators.get(type);
    if (!op) throw new UnknownPetTypeError(type, this.types());
    return op;
  }

  /** Registered types, in PET_TYPES order. */
  types(): PetType[] {
    return PET_TYPES.filter((t) => this.operators.has(t));
  }
}

/** A registry with the paper's four types, STANDARD, LoRA and prefix-tuning. */
export function defaultPetRegistry(): PetRegistry {
  return new PetRegistry()
    .register(new AdapterOperator())
    .register(new MaskBertOperator())
    .register(new DiffOperator())
    .register(new BitFitOperator())
    .register(new LoraOperator())
    .register(new PrefixOperator())
    .register(new StandardOperator());
}
