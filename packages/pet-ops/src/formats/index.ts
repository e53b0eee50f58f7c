export { PET_FORMAT, PET_FORMAT_VERSION, petConfigJson, petMetadata, readPetParams, readPetParamsFile, writePetParams, writePetParamsFile } from './pet-file.js';
