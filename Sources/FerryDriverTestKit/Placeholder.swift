import FerryCore
